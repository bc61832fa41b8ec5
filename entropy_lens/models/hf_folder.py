"""One Hugging Face folder, read step by step with our checks before transformers', so that a bad input
gets a one-line `EntropyLensError` that says what to do. `load_model` runs the steps in this order:

    check_weights(folder)                      weights there; safetensors headers opened with `safe_open`
    load_config(folder, trust)                 config.json, through transformers (local files only)
    check_causal_lm(config, folder)            a decoder-only LM, checked before any weights are read
    set_rope_scaling(config, spec, folder)     --rope-scaling TYPE:FACTOR into the config's rope_parameters
    config_shapes(config)                      (n_layers, n_heads, n_kv_heads, head_dim)
    load_weights(folder, config, dtype, trust) missing weights (transformers would make them random) refused
    ignored_remote_code(config, model, ...)    the auto_map class that did not run, said in one line
    load_tokenizer(folder, trust)
    config_hash(config)                        the config's identity, as a results file records it

Design choices:
- `.bin` weights are unpickled only through `torch.load(weights_only=True)`: transformers 5.23's
  default, passed explicitly here so a future default change cannot turn it off.
- A config whose `auto_map` names the checkpoint's own model code, loaded without trust_remote_code,
  gets transformers' built-in class of its `model_type` (transformers' choice, never the code): this is
  said in one stderr line and recorded (`LoadedModel.remote_code_ignored`), so what ran is never a guess.
- Weights are loaded directly in the requested dtype (`dtype=` in transformers 5) to halve memory
  for bf16/fp16; the attention implementation is left as loaded (sdpa).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.models.scales import SCALE_SUFFIX

if TYPE_CHECKING:
    import torch

__all__ = [
    "ROPE_SCALINGS",
    "check_causal_lm",
    "check_weights",
    "config_hash",
    "config_shapes",
    "ignored_remote_code",
    "load_config",
    "load_tokenizer",
    "load_weights",
    "set_rope_scaling",
]

log = logging.getLogger(__name__)

# Keys of the config that say where/how it was loaded, not what the model is.
_UNHASHED = {"_name_or_path", "transformers_version", "dtype", "torch_dtype"}


def check_weights(folder: Path) -> None:
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


def load_config(folder: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
    except (ValueError, OSError, KeyError) as e:
        raise EntropyLensError(
            f"cannot read {folder / 'config.json'} ({first_line(e)}); fix the file, upgrade "
            "transformers, or pass --trust-remote-code (trust_remote_code=True in Python) for custom model "
            "code you trust"
        ) from None


def check_causal_lm(config: Any, folder: Path) -> None:
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


def ignored_remote_code(config: Any, model: Any, folder: Path, trust_remote_code: bool) -> str | None:
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


def set_rope_scaling(config: Any, spec: str, folder: Path) -> None:
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


def load_weights(folder: Path, config: Any, dtype: torch.dtype, trust_remote_code: bool) -> Any:
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


def load_tokenizer(folder: Path, trust_remote_code: bool) -> Any:
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


def config_shapes(config: Any) -> tuple[int, int, int, int]:
    """(n_layers, n_heads, n_kv_heads, head_dim) from the (text) config, with the usual defaults."""
    text = config.get_text_config()
    n_heads = int(text.num_attention_heads)
    n_kv_heads = int(getattr(text, "num_key_value_heads", None) or n_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // n_heads)
    return int(text.num_hidden_layers), n_heads, n_kv_heads, head_dim
