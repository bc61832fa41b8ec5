"""The device and dtype a model is loaded onto: the names every command's --device and --dtype take.

    resolve_device("auto")          # cuda if available, else cpu
    resolve_dtype("auto", device)   # bfloat16 on a CUDA device, float32 elsewhere

torch is imported when a function runs, not at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from entropy_lens.errors import EntropyLensError

if TYPE_CHECKING:
    import torch

__all__ = ["resolve_device", "resolve_dtype"]

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}


def resolve_dtype(dtype: str | torch.dtype, device: torch.device | str | None = None) -> torch.dtype:
    """'float32'/'fp32', 'bfloat16'/'bf16', 'float16'/'fp16' or a torch.dtype -> torch.dtype; 'auto' is
    bfloat16 on a CUDA `device` and float32 elsewhere (the one place that rule lives)."""
    import torch

    key = str(dtype).lower().removeprefix("torch.")
    if key == "auto":
        key = "bfloat16" if device is not None and torch.device(device).type == "cuda" else "float32"
    if key not in _DTYPES:
        raise EntropyLensError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)}")
    return getattr(torch, _DTYPES[key])


def resolve_device(device: str) -> torch.device:
    """'cpu', 'cuda', 'cuda:N', 'mps' or 'auto' (cuda if available, else cpu) -> torch.device."""
    import torch

    name = str(device).lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
        raise EntropyLensError(f"unknown device {device!r}; use cpu, cuda, cuda:N, mps or auto")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise EntropyLensError(
                f"--device {device} was asked for but this machine has no CUDA GPU "
                "(torch.cuda.is_available() is False); use --device cpu or install a CUDA build of torch"
            )
        if index and int(index) >= torch.cuda.device_count():
            raise EntropyLensError(
                f"--device {device} was asked for but this machine has {torch.cuda.device_count()} "
                "CUDA GPU(s); use cuda:0 .. cuda:N-1 or auto"
            )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise EntropyLensError(f"--device {device} was asked for but MPS is not available; use --device cpu")
    return torch.device(name)
