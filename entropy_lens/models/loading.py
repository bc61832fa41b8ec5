"""Load a causal LM checkpoint (bundled name, .gguf file or Hugging Face folder) for analysis.

`load_model(ckpt)` -> `LoadedModel`: the model (eval, on device, in dtype), its tokenizer and the
facts the rest of the package records (config hash, NoPE, head scales, train length, shapes).

Design choices:
- transformers reads local files only (`local_files_only=True` on every call). A Hub id (org/name)
  is first resolved to a snapshot folder through huggingface_hub's cache (`models/hub.py`, which
  honours HF_HUB_OFFLINE); any other name that is not bundled and not on disk is an error
  (`resolve_ckpt`).
- Our checks come before transformers', so a bad input gets a one-line `EntropyLensError` that says
  what to do: corrupt safetensors headers are opened with `safe_open` first, the config is checked
  to be a decoder-only LM before any weights are read, and missing weights (which transformers would
  fill with random values) are refused; the folder's steps are `models/hf_folder.py`.
- GGUF files and bundled names are turned into a cached float32 folder by `models/gguf.py`.
- Weights are loaded in the requested dtype, then moved to the device (`models/devices.py` resolves
  both names); NoPE is applied after the move (`models/nope.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entropy_lens.errors import EntropyLensError
from entropy_lens.models.bundled import BUNDLED_MODELS
from entropy_lens.models.devices import resolve_device, resolve_dtype
from entropy_lens.models.gguf import ensure_gguf_cache, gguf_train_len
from entropy_lens.models.hf_folder import (
    check_causal_lm,
    check_weights,
    config_hash,
    config_shapes,
    ignored_remote_code,
    load_config,
    load_tokenizer,
    load_weights,
    set_rope_scaling,
)
from entropy_lens.models.hub import hub_snapshot, looks_like_hub_id
from entropy_lens.models.nope import apply_nope, rotary_modules
from entropy_lens.models.scales import read_checkpoint_head_scales

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["LoadedModel", "checkpoint_tokenizer", "declared_train_len", "load_model", "resolve_ckpt"]


@dataclass
class LoadedModel:
    """A checkpoint ready for analysis, with the facts a results file records about it."""

    model: PreTrainedModel  # eval mode, on device, in dtype
    tokenizer: PreTrainedTokenizerBase | None  # None: loaded with tokenizer=False (token ids need none)
    name: str  # CKPT exactly as given ("smollm2", a path)
    source: str  # absolute path of the folder or .gguf file loaded
    config_hash: str  # sha256[:16] of the config JSON (sorted keys), before NoPE
    nope: bool  # rotary removed
    head_scales: np.ndarray | None  # float64 (layer, head) multipliers of 1/sqrt(d), or None
    train_len: int | None  # config `train_len`, or a GGUF's context length, if declared
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    model_class: str = ""  # the class that ran, e.g. "LlamaForCausalLM"
    remote_code_ignored: str | None = (
        None  # the config's auto_map class that did not run (no trust_remote_code)
    )
    # `source` as every machine names it: a bundled model's path among the installed packages
    # (BundledModel.identity), a Hub id's "hub:org/name@commit"; None for a folder or file of the user's
    portable_source: str | None = None

    def facts(self) -> dict:
        """What every results file records about the checkpoint that ran (JSON types), the same keys in
        a scan's meta, a passkey record and an eval record; `remote_code_ignored` only where a config's
        class did not run. `model_source` is `portable_source` where there is one, else `source` (a
        writer names it from its output: runs/provenance.py's `model_facts`)."""
        return {
            "model_source": self.portable_source or self.source,
            "model_class": self.model_class,
            **({"remote_code_ignored": self.remote_code_ignored} if self.remote_code_ignored else {}),
            "config_hash": self.config_hash,
            "nope": self.nope,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
        }


def portable_source(ckpt: str, source: Path) -> str | None:
    """`LoadedModel.portable_source` of `ckpt` resolved to `source`."""
    if ckpt in BUNDLED_MODELS:
        return BUNDLED_MODELS[ckpt].identity
    if looks_like_hub_id(ckpt):  # huggingface_hub's snapshot folder is named by the commit
        return f"hub:{ckpt}@{source.name}"
    return None


def resolve_ckpt(ckpt: str, revision: str | None = None) -> Path:
    """The file or folder `ckpt` names, as `load_model` reads it: a bundled name -> its .gguf; a Hub id
    (org/name) -> its snapshot in huggingface_hub's cache; else an existing .gguf file or a folder with
    config.json (EntropyLensError otherwise, naming the fix)."""
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


def declared_train_len(
    ckpt: str, *, revision: str | None = None, trust_remote_code: bool = False
) -> int | None:
    """The training length `ckpt` declares, without loading weights: config.json's `train_len`, or a
    GGUF file's context length (`<arch>.context_length`, read from its header)."""
    source = resolve_ckpt(str(ckpt), revision)
    if source.is_file():
        return gguf_train_len(source)
    value = getattr(load_config(source, trust_remote_code), "train_len", None)
    return None if value is None else int(value)


def checkpoint_tokenizer(ckpt: str, *, revision: str | None = None, trust_remote_code: bool = False) -> Any:
    """The tokenizer of `ckpt` (as `load_model` names checkpoints), without loading weights."""
    source = resolve_ckpt(str(ckpt), revision)
    folder = ensure_gguf_cache(source) if source.is_file() else source
    return load_tokenizer(folder, trust_remote_code)


def load_model(
    ckpt: str,
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    nope: bool | None = None,
    rope_scaling: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    tokenizer: bool = True,
) -> LoadedModel:
    """Load `ckpt` (bundled name, Hub id, .gguf file or HF folder) for analysis; see the module docstring.

    Args:
        ckpt: a bundled name ("smollm2"), a Hub id (org/name), a .gguf file or a Hugging Face folder.
        dtype: the weights' dtype, a name ("float32", "bfloat16", "float16") or a torch.dtype.
        device: where the model runs ("cpu", "cuda", "cuda:N" or a torch.device).
        nope: None follows the checkpoint (config `nope: true`), True removes rotary, False keeps it;
            None on a checkpoint whose name says NoPE but whose config has rotary embeddings is refused
            (the released TinyLlama-NoPE's config is plain Llama: loaded as it is, every number would
            be RoPE's).
        rope_scaling: "TYPE:FACTOR" (dynamic, linear or yarn; e.g. "dynamic:2", the paper's RoPE-NTK)
            sets the config's rope_parameters before the weights load, relative to
            max_position_embeddings.
        revision: the branch, tag or commit of a Hub id; None: main.
        trust_remote_code: allow the checkpoint's own Python code.
        tokenizer: False loads no tokenizer (LoadedModel.tokenizer None), for inputs that are token ids
            already: a folder without tokenizer files is then accepted.

    Returns:
        LoadedModel: the model (eval mode, on device, in dtype), its tokenizer and the facts a results
        file records (name, source, config hash, NoPE, head scales, training length, shapes).

    Raises:
        EntropyLensError: a checkpoint that cannot be found or loaded, is not a causal LM, or says NoPE
            in its name with rotary in its config (nope None), each with its fix.
    """
    torch_dtype, torch_device = resolve_dtype(dtype), resolve_device(device)
    source = resolve_ckpt(str(ckpt), revision)
    folder = ensure_gguf_cache(source) if source.is_file() else source
    check_weights(folder)
    config = load_config(folder, trust_remote_code)
    check_causal_lm(config, folder)
    if rope_scaling:
        set_rope_scaling(config, rope_scaling, folder)
    n_layers, n_heads, n_kv_heads, head_dim = config_shapes(config)
    head_scales = read_checkpoint_head_scales(folder, n_layers, n_heads)
    model = load_weights(folder, config, torch_dtype, trust_remote_code)
    ignored = ignored_remote_code(config, model, folder, trust_remote_code)
    loaded_tokenizer = load_tokenizer(folder, trust_remote_code) if tokenizer else None
    model = model.to(torch_device).eval()
    digest = config_hash(model.config)  # before NoPE (which changes buffers, not the config, anyway)
    portable = portable_source(str(ckpt), source)
    if portable is not None:  # a bundled model or Hub id by its name, as from_pretrained(name) would set
        model.config._name_or_path = str(ckpt)  # (what a recorder's meta names: never the install folder)

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
    if train_len is None and source.is_file():
        train_len = gguf_train_len(source)  # the GGUF's declared context (the converted config has none)
    if train_len is not None and not str(train_len).isdigit():
        raise EntropyLensError(
            f"config.json of {folder} sets train_len to {train_len!r}; make it a whole number of tokens"
        )
    return LoadedModel(
        model=model,
        tokenizer=loaded_tokenizer,
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
        portable_source=portable,
    )
