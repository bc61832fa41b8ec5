"""Per-head attention scales: read from a checkpoint or a file, and validated.

A head scale is the multiplier of 1/sqrt(d) in a head's attention logits,
s(h) = λ(h)·√d, so that logits = s(h) · q·k / √d  (s = 1 is the stock model). Scales are
kept as float64 arrays of shape (layer, head), counting query heads (not KV heads).

Design choices:
- Checkpoints trained with learnable scales store them as `model.layers.{l}.self_attn.scale_param`
  (shape (heads,)). A stock transformers model has no such parameter and drops them as unexpected
  keys, so they are read here straight from the safetensors headers with `safe_open`, one tensor at
  a time, without loading the weights. Matching is by the suffix `self_attn.scale_param` and the
  layer index is the number just before it, so other module prefixes (`transformer.h.3.`) work too.
- A partial set (some layers missing) is an error rather than "ones for the rest": a checkpoint that
  learned scales in 30 layers and lost one would otherwise be analysed silently wrong.
- Everything funnels through `validate_head_scales`, so checkpoint scales, files and arrays from a
  search all obey one contract: exact shape, finite, non-negative, float64.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from entropy_lens.errors import EntropyLensError

SCALE_SUFFIX = "self_attn.scale_param"
# The layer index is the integer path component right before the suffix: "model.layers.12.self_attn..."
_SCALE_KEY = re.compile(r"(?:^|\.)(\d+)\." + re.escape(SCALE_SUFFIX) + r"$")

__all__ = ["SCALE_SUFFIX", "load_head_scales_file", "read_checkpoint_head_scales", "validate_head_scales"]


def validate_head_scales(arr: Any, n_layers: int, n_heads: int, *, source: str) -> np.ndarray:
    """Check head scales against a model and return them as float64 (layer, head).

    `source` names where they came from (a file, "checkpoint /path", "--head-scales"), and is
    quoted in every error message.
    """
    try:
        out = np.array(arr, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise EntropyLensError(
            f"head scales from {source} are not a numeric [layers, heads] array ({e}); "
            f"give a rectangular array of {n_layers} layers × {n_heads} heads"
        ) from None
    if out.shape != (n_layers, n_heads):
        raise EntropyLensError(
            f"head scales from {source} have shape {list(out.shape)} but the model has "
            f"{n_layers} layers × {n_heads} query heads; give an array of shape [{n_layers}, {n_heads}]"
        )
    bad = np.argwhere(~np.isfinite(out))
    if len(bad):
        layer, head = (int(i) for i in bad[0])
        raise EntropyLensError(
            f"head scale at layer {layer}, head {head} from {source} is {out[layer, head]} "
            f"({len(bad)} non-finite values in all); scales must be finite numbers"
        )
    bad = np.argwhere(out <= 0)
    if len(bad):  # the rule of --scale: a positive multiplier (0 would be no scale at all)
        layer, head = (int(i) for i in bad[0])
        raise EntropyLensError(
            f"head scale at layer {layer}, head {head} from {source} is {out[layer, head]:g} ({len(bad)} "
            "values <= 0 in all); scales multiply 1/sqrt(d) and must be positive, as --scale"
        )
    return out


def _layer_of(key: str) -> int | None:
    match = _SCALE_KEY.search(key)
    return int(match.group(1)) if match else None


def _collect_per_layer(found: dict[int, np.ndarray], n_layers: int, *, source: str) -> list[np.ndarray]:
    """Order per-layer vectors 0..n_layers-1, refusing gaps and extra layers."""
    missing = [layer for layer in range(n_layers) if layer not in found]
    if missing:
        raise EntropyLensError(
            f"{source} has `{SCALE_SUFFIX}` tensors for {len(found)} of {n_layers} layers "
            f"(missing layers {missing[:8]}{'...' if len(missing) > 8 else ''}); "
            "save a scale tensor for every layer, or remove them all to use the stock scale"
        )
    extra = sorted(set(found) - set(range(n_layers)))
    if extra:
        raise EntropyLensError(
            f"{source} has `{SCALE_SUFFIX}` tensors for layers {extra} but the model has only "
            f"{n_layers} layers; use scales saved for this model"
        )
    return [found[layer] for layer in range(n_layers)]


def _per_layer_rows(rows: list[np.ndarray], n_heads: int, *, source: str) -> np.ndarray:
    for layer, row in enumerate(rows):
        if row.shape != (n_heads,):
            raise EntropyLensError(
                f"`{SCALE_SUFFIX}` of layer {layer} in {source} has shape {list(row.shape)}, "
                f"expected [{n_heads}] (one scale per query head); use scales saved for this model"
            )
    return np.stack(rows)


def _read_safetensors_scales(files: list[Path]) -> dict[int, np.ndarray]:
    """{layer: (heads,) float64} for every `...self_attn.scale_param` in the files (headers only)."""
    from safetensors import SafetensorError, safe_open

    found: dict[int, np.ndarray] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open handles are not dicts)
                    layer = _layer_of(key)
                    if layer is None:
                        continue
                    if layer in found:
                        raise EntropyLensError(
                            f"layer {layer} has two `{SCALE_SUFFIX}` tensors (second: {key!r} in {file}); "
                            "keep one per layer"
                        )
                    # float() first: the tensor may be bfloat16, which numpy cannot hold.
                    found[layer] = f.get_tensor(key).float().numpy().astype(np.float64)
        except SafetensorError as e:
            raise EntropyLensError(
                f"{file} is not a readable safetensors file ({e}); re-download or re-save it"
            ) from None
    return found


def read_checkpoint_head_scales(folder: str | Path, n_layers: int, n_heads: int) -> np.ndarray | None:
    """Scales stored in a checkpoint folder's `*.safetensors` as per-layer `scale_param` tensors.

    Returns float64 (layer, head), or None when the folder holds no such tensor (a stock model).
    """
    folder = Path(folder)
    found = _read_safetensors_scales(sorted(folder.glob("*.safetensors")))
    if not found:
        return None
    source = f"checkpoint {folder}"
    rows = _collect_per_layer(found, n_layers, source=source)
    return validate_head_scales(
        _per_layer_rows(rows, n_heads, source=source), n_layers, n_heads, source=source
    )


def _read_safetensors_file(path: Path, n_layers: int, n_heads: int) -> Any:
    from safetensors import SafetensorError, safe_open

    found = _read_safetensors_scales([path])
    if found:
        rows = _collect_per_layer(found, n_layers, source=str(path))
        return _per_layer_rows(rows, n_heads, source=str(path))
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
            if len(keys) != 1:
                raise EntropyLensError(
                    f"{path} holds {len(keys)} tensors ({', '.join(keys[:5])}) and no `{SCALE_SUFFIX}` "
                    f"keys; save either one [layers, heads] tensor or one `{SCALE_SUFFIX}` per layer"
                )
            return f.get_tensor(keys[0]).float().numpy()
    except SafetensorError as e:
        raise EntropyLensError(f"{path} is not a readable safetensors file ({e}); re-save it") from None


def _read_json_file(path: Path) -> Any:
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:  # nesting too deep
        raise EntropyLensError(
            f'{path} is not valid JSON ({e}); write a nested list [[...], ...] or {{"scales": [[...]]}}'
        ) from None
    if isinstance(data, dict):
        if "scales" not in data:
            raise EntropyLensError(
                f'{path} is a JSON object without a "scales" key (keys: {sorted(data)[:5]}); '
                'write {"scales": [[...], ...]} or a bare nested list'
            )
        data = data["scales"]
    return data


def load_head_scales_file(path: str | Path, n_layers: int, n_heads: int) -> np.ndarray:
    """Head scales from a `.safetensors`, `.npy` or `.json` file, validated as float64 (layer, head).

    .safetensors: per-layer `...self_attn.scale_param` tensors, or a single [layers, heads] tensor.
    .npy: a [layers, heads] array.  .json: [[...], ...] or {"scales": [[...], ...]}.
    """
    path = Path(path)
    if not path.is_file():
        raise EntropyLensError(
            f"head-scales file {path} does not exist; pass a .safetensors, .npy or .json file"
        )
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        data = _read_safetensors_file(path, n_layers, n_heads)
    elif suffix == ".npy":
        try:
            data = np.load(path, allow_pickle=False)  # no pickles: a scales file must not run code
        except (ValueError, OSError) as e:
            raise EntropyLensError(
                f"{path} is not a plain numeric .npy array ({e}); re-save it with np.save(path, array)"
            ) from None
    elif suffix == ".json":
        data = _read_json_file(path)
    else:
        raise EntropyLensError(
            f"head-scales file {path} has an unknown extension {suffix!r}; use .safetensors, .npy or .json"
        )
    return validate_head_scales(data, n_layers, n_heads, source=str(path))
