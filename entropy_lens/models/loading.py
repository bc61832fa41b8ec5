"""Load a causal LM checkpoint (bundled name, .gguf file or Hugging Face folder) for analysis.

`load_model(ckpt)` -> `LoadedModel`: the model (eval, on device, in dtype), its tokenizer and the
facts the rest of the package records (config hash, NoPE, head scales, train length, shapes).

Design choices:
- transformers reads local files only (`local_files_only=True` on every call). A Hub id (org/name)
  is first resolved to a snapshot folder through huggingface_hub's cache (`models/hub.py`, which
  honours HF_HUB_OFFLINE); any other name that is not bundled and not on disk is an error.
- Our checks come before transformers', so a bad input gets a one-line `EntropyLensError` that says
  what to do: corrupt safetensors headers are opened with `safe_open` first, the config is checked
  to be a decoder-only LM before any weights are read, and missing weights (which transformers would
  fill with random values) are refused.
- `.bin` weights are unpickled only through `torch.load(weights_only=True)`: transformers 5.23's
  default, passed explicitly here so a future default change cannot turn it off.
- GGUF files and bundled names are turned into a cached float32 folder by `models/gguf.py`.
- A config whose `auto_map` names the checkpoint's own model code, loaded without trust_remote_code,
  gets transformers' built-in class of its `model_type` (transformers' choice, never the code): this is
  said in one stderr line and recorded (`LoadedModel.remote_code_ignored`), so what ran is never a guess.
- Weights are loaded directly in the requested dtype (`dtype=` in transformers 5) to halve memory
  for bf16/fp16, then moved to the device; the attention implementation is left as loaded (sdpa).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.models.bundled import BUNDLED_MODELS, BundledModel
from entropy_lens.models.gguf import ensure_gguf_cache
from entropy_lens.models.hub import hub_snapshot, looks_like_hub_id
from entropy_lens.models.nope import apply_nope, rotary_modules
from entropy_lens.models.scales import SCALE_SUFFIX, read_checkpoint_head_scales

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "BUNDLED_MODELS",
    "BundledModel",
    "LoadedModel",
    "load_model",
    "resolve_ckpt",
    "resolve_device",
    "resolve_dtype",
]

log = logging.getLogger(__name__)

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}
# Keys of the config that say where/how it was loaded, not what the model is.
_UNHASHED = {"_name_or_path", "transformers_version", "dtype", "torch_dtype"}


@dataclass
class LoadedModel:
    """A checkpoint ready for analysis, with the facts a results file records about it."""

    model: PreTrainedModel  # eval mode, on device, in dtype
    tokenizer: PreTrainedTokenizerBase
    name: str  # CKPT exactly as given ("smollm2", a path)
    source: str  # absolute path of the folder or .gguf file loaded
    config_hash: str  # sha256[:16] of the config JSON (sorted keys), before NoPE
    nope: bool  # rotary removed
    head_scales: np.ndarray | None  # float64 (layer, head) multipliers of 1/sqrt(d), or None
    train_len: int | None  # config `train_len`, if declared
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    model_class: str = ""  # the class that ran, e.g. "LlamaForCausalLM"
    remote_code_ignored: str | None = (
        None  # the config's auto_map class that did not run (no trust_remote_code)
    )


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


def resolve_ckpt(ckpt: str, revision: str | None = None) -> Path:
    """Bundled name -> its .gguf; a Hub id (org/name) -> its snapshot in huggingface_hub's cache;
    else an existing .gguf file or a folder with config.json."""
    if looks_like_hub_id(ckpt):
        return hub_snapshot(ckpt, revision=revision)
    if revision is not None:
        raise EntropyLensError(
            f"--revision applies to Hugging Face Hub ids (org/name), not to {ckpt!r}; drop --revision"
        )
    if ckpt in BUNDLED_MODELS:
        return BUNDLED_MODELS[ckpt].path()
    path = Path(ckpt).expanduser()
    names = ", ".join(BUNDLED_MODELS)
    if not path.exists():
        raise EntropyLensError(
            f"model {ckpt!r} not found: not a bundled name ({names}), no such file or folder, and not a "
            "Hub id (org/name); pass a Hugging Face folder or Hub id, a .gguf file or a bundled name"
        )
    path = path.resolve()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path
    if path.is_dir() and (path / "config.json").is_file():
        return path
    what = "folder has no config.json" if path.is_dir() else "file is not a .gguf file"
    raise EntropyLensError(
        f"model {ckpt!r}: this {what}; pass a Hugging Face folder with config.json, "
        f"a .gguf file or a bundled name ({names})"
    )


# ---- Hugging Face folder ----------------------------------------------------------------------------


def _check_weights(folder: Path) -> None:
    """Refuse folders without weights and unreadable safetensors before transformers sees them."""
    from safetensors import SafetensorError, safe_open

    safetensors = sorted(folder.glob("*.safetensors"))
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not safetensors and not bins:
        raise EntropyLensError(
            f"{folder} has config.json but no weights (model.safetensors or pytorch_model.bin); "
            "save the model into it with model.save_pretrained(folder)"
        )
    for file in safetensors:
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except SafetensorError as e:
            raise EntropyLensError(
                f"{file} is corrupt or truncated ({e}); re-download or re-save the checkpoint"
            ) from None


def _load_config(folder: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
    except (ValueError, OSError, KeyError) as e:
        raise EntropyLensError(
            f"cannot read {folder / 'config.json'} ({first_line(e)}); fix the file, upgrade "
            "transformers, or pass --trust-remote-code (trust_remote_code=True in Python) for custom model "
            "code you trust"
        ) from None


def _check_causal_lm(config: Any, folder: Path) -> None:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = getattr(config, "model_type", None)
    remote = "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {})
    # Encoders (BERT, RoBERTa, ...) also register a causal-LM head; being a masked LM gives them away.
    decoder_only = (
        (model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or remote)
        and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
        and not getattr(config, "is_encoder_decoder", False)
    )
    if not decoder_only:
        raise EntropyLensError(
            f"{folder} is not a causal language model (config model_type {model_type!r}); "
            "entropy-lens needs a decoder-only model such as Llama"
        )


def _remote_code_ignored(config: Any, model: Any, folder: Path, trust_remote_code: bool) -> str | None:
    """The auto_map class that names the checkpoint's own code when transformers loaded its built-in class
    instead (trust_remote_code off), said in one stderr line; None when the config has no such code."""
    auto_map = getattr(config, "auto_map", None) or {}
    remote = auto_map.get("AutoModelForCausalLM") if isinstance(auto_map, dict) else None
    if trust_remote_code or not remote:
        return None
    remote = remote[0] if isinstance(remote, (list, tuple)) else str(remote)
    print(
        f"entropy-lens: note: {folder.name}'s config.json names its own model code ({remote}, auto_map), "
        f"which did not run: transformers loaded its built-in {type(model).__name__} for model_type "
        f"{getattr(config, 'model_type', None)!r}; pass --trust-remote-code to run that code, if you trust it",
        file=sys.stderr,
        flush=True,
    )
    return remote


ROPE_SCALINGS = ("dynamic", "linear", "yarn")


def _set_rope_scaling(config: Any, spec: str, folder: Path) -> None:
    kind, _, factor = spec.partition(":")
    try:
        f = float(factor)
    except ValueError:
        f = float("nan")
    if kind not in ROPE_SCALINGS or not f >= 1:
        raise EntropyLensError(
            f"--rope-scaling {spec!r} is not TYPE:FACTOR with TYPE one of {', '.join(ROPE_SCALINGS)} and "
            "FACTOR >= 1; e.g. --rope-scaling dynamic:2"
        )
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or getattr(config, "nope", False):
        raise EntropyLensError(f"{folder} has no rotary embedding to scale; drop --rope-scaling")
    params = {**params, "rope_type": kind, "factor": f}
    if kind == "yarn":
        params["original_max_position_embeddings"] = config.max_position_embeddings
    config.rope_parameters = params


def _load_weights(folder: Path, config: Any, dtype: torch.dtype, trust_remote_code: bool) -> Any:
    import pickle

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # one "Loading weights" bar per load drowns the scan's own progress
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            folder,
            config=config,
            dtype=dtype,
            local_files_only=True,
            weights_only=True,
            trust_remote_code=trust_remote_code,
            output_loading_info=True,
        )
    except pickle.UnpicklingError:
        raise EntropyLensError(
            f"the .bin weights in {folder} hold Python objects that torch.load(weights_only=True) will not "
            "run; if you trust the source, convert them to model.safetensors and load that"
        ) from None
    except (OSError, RuntimeError) as e:  # a missing shard, a torn zip, a size mismatch
        raise EntropyLensError(
            f"cannot load the weights in {folder} ({first_line(e)}); re-download the checkpoint or "
            "re-save it with model.save_pretrained(folder) (safetensors)"
        ) from None
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise EntropyLensError(
            f"{folder} lacks {len(missing)} weights the model needs (e.g. {missing[0]}), which would be "
            "random; use a complete checkpoint saved for this architecture"
        )
    scale_keys = [k for k in info.get("unexpected_keys") or [] if k.endswith(SCALE_SUFFIX)]
    if scale_keys:
        # transformers' load report lists them as UNEXPECTED; say what they are.
        log.warning(
            "entropy-lens: the %d `%s` tensors reported as UNEXPECTED are per-head attention scales; "
            "they were read into LoadedModel.head_scales, not into the model",
            len(scale_keys),
            SCALE_SUFFIX,
        )
    return model


def _load_tokenizer(folder: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise EntropyLensError(
            f"cannot load a tokenizer from {folder} ({first_line(e)}); save one into the folder "
            "with tokenizer.save_pretrained(folder)"
        ) from None


def config_hash(config: Any) -> str:
    """sha256[:16] of the config JSON (all values, sorted keys), minus path/version/dtype keys."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in _UNHASHED}
        return value

    data = strip(json.loads(config.to_json_string(use_diff=False)))
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _shapes(config: Any) -> tuple[int, int, int, int]:
    """(n_layers, n_heads, n_kv_heads, head_dim) from the (text) config, with the usual defaults."""
    text = config.get_text_config()
    n_heads = int(text.num_attention_heads)
    n_kv_heads = int(getattr(text, "num_key_value_heads", None) or n_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // n_heads)
    return int(text.num_hidden_layers), n_heads, n_kv_heads, head_dim


def declared_train_len(
    ckpt: str, *, revision: str | None = None, trust_remote_code: bool = False
) -> int | None:
    """The training length `ckpt`'s config.json declares (`train_len`), without loading weights."""
    source = resolve_ckpt(str(ckpt), revision)
    folder = ensure_gguf_cache(source) if source.is_file() else source
    value = getattr(_load_config(folder, trust_remote_code), "train_len", None)
    return None if value is None else int(value)


def load_model(
    ckpt: str,
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    nope: bool | None = None,
    rope_scaling: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
) -> LoadedModel:
    """Load `ckpt` (bundled name, Hub id, .gguf file or HF folder) for analysis; see the module docstring.

    nope: None follows the checkpoint (config `nope: true`), True removes rotary, False keeps it; None
        on a checkpoint whose name says NoPE but whose config has rotary embeddings is refused (the
        released TinyLlama-NoPE's config is plain Llama: loaded as it is, every number would be RoPE's).
    rope_scaling: "TYPE:FACTOR" (dynamic, linear or yarn; e.g. "dynamic:2", the paper's RoPE-NTK)
        sets the config's rope_parameters before the weights load, relative to max_position_embeddings.
    """
    torch_dtype, torch_device = resolve_dtype(dtype), resolve_device(device)
    source = resolve_ckpt(str(ckpt), revision)
    folder = ensure_gguf_cache(source) if source.is_file() else source
    _check_weights(folder)
    config = _load_config(folder, trust_remote_code)
    _check_causal_lm(config, folder)
    if rope_scaling:
        _set_rope_scaling(config, rope_scaling, folder)
    n_layers, n_heads, n_kv_heads, head_dim = _shapes(config)
    head_scales = read_checkpoint_head_scales(folder, n_layers, n_heads)
    model = _load_weights(folder, config, torch_dtype, trust_remote_code)
    ignored = _remote_code_ignored(config, model, folder, trust_remote_code)
    tokenizer = _load_tokenizer(folder, trust_remote_code)
    model = model.to(torch_device).eval()
    digest = config_hash(model.config)  # before NoPE (which changes buffers, not the config, anyway)

    declared = bool(getattr(config, "nope", False))
    if nope is None and not declared and rotary_modules(model) and "nope" in Path(str(ckpt)).name.lower():
        raise EntropyLensError(
            f"{ckpt} says NoPE in its name but its config declares rotary position embeddings, which "
            'transformers applies: pass --nope (or add "nope": true to its config.json, which every '
            "command reads) to remove them, as for TinyLlama-NoPE whose config is plain Llama, or --no-nope "
            "to keep them"
        )
    use_nope = declared if nope is None else bool(nope)
    # A checkpoint that declares NoPE may have no rotary module at all; forcing NoPE on one must.
    if use_nope and (nope is True or rotary_modules(model)):
        apply_nope(model)
    train_len = getattr(config, "train_len", None)
    if train_len is not None and not str(train_len).isdigit():
        raise EntropyLensError(
            f"config.json of {folder} sets train_len to {train_len!r}; make it a whole number of tokens"
        )
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=str(ckpt),
        source=str(source),
        config_hash=digest,
        nope=use_nope,
        head_scales=head_scales,
        train_len=None if train_len is None else int(train_len),
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        model_class=type(model).__name__,
        remote_code_ignored=ignored,
    )
