"""A run's model variant, shared by scans, passkey runs, head searches and `eval`: the checkpoint as its
flags load it, the attention scales it is scanned at and its position schedule, and all of it in one
record for the commands that evaluate a model.

    variant = load_model_variant(config)     # a config with the Checkpoint, Loading and Scaling settings
    with variant.session():                  # the variant's attention scale, in the toolkit's attention
        variant.lm.model(ids)                # function (capture/attention.py)

The steps are `scan`'s (runs/scan.py): --device and --dtype resolved, the checkpoint loaded as --nope,
--rope-scaling and --revision say (`load_variant`, refused where the capture cannot run it), the scale
the capture applies (`attention_scales`: --scale, --head-scales, or the checkpoint's own λ(h)) and the
position schedule with the training length L (`variant_schedule`: --scale-schedule, --train-len).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from entropy_lens.capture import ScaleSession, Schedule, check_supported, parse_schedule
from entropy_lens.errors import EntropyLensError
from entropy_lens.models import (
    LoadedModel,
    load_head_scales_file,
    load_model,
    resolve_device,
    resolve_dtype,
    validate_head_scales,
)
from entropy_lens.results.files import beside_record
from entropy_lens.runs.provenance import model_facts

__all__ = ["ModelVariant", "attention_scales", "load_model_variant", "load_variant", "variant_schedule"]


def load_variant(config, device: torch.device, dtype: torch.dtype, *, tokenizer: bool = True) -> LoadedModel:
    """The checkpoint of a config with the Checkpoint and Loading settings (a scan's, a passkey run's, a head search's)
    as its flags load it (--nope, --rope-scaling, --revision, ...); refused when the capture cannot run it.
    `tokenizer` False: none loaded (a scan of token ids, which a folder without tokenizer files may run)."""
    lm = load_model(
        config.model,
        dtype=dtype,
        device=device,
        nope=config.nope,
        rope_scaling=config.rope_scaling,
        revision=config.revision,
        trust_remote_code=config.trust_remote_code,
        tokenizer=tokenizer,
    )
    check_supported(lm.model)
    return lm


def variant_schedule(config, lm: LoadedModel) -> Schedule | None:
    """--scale-schedule with the training length L (--train-len, else the model's; llama4's needs none),
    or None."""
    train_len = config.train_len if config.train_len is not None else lm.train_len
    needs_train_len = (
        config.scale_schedule is not None and parse_schedule(config.scale_schedule).needs_train_len
    )
    if needs_train_len and train_len is None:
        raise EntropyLensError(
            f"--scale-schedule needs the model's training length L, which {config.model} does not "
            "declare; pass --train-len L"
        )
    return parse_schedule(config.scale_schedule, train_len)


def attention_scales(config, lm: LoadedModel):
    """(what the capture applies, where it came from) for a config with `scale` and `head_scales` (a
    scan's, a passkey run's). None = the model as trained."""
    if config.scale is not None:
        return float(config.scale), "uniform"
    if config.head_scales is not None:
        arr = load_head_scales_file(config.head_scales, lm.n_layers, lm.n_heads)
        return arr, str(Path(config.head_scales).resolve())
    if lm.head_scales is not None:
        return validate_head_scales(lm.head_scales, lm.n_layers, lm.n_heads, source=lm.source), "checkpoint"
    return None, "none"


@dataclass
class ModelVariant:
    """A loaded checkpoint and the attention scale its variant applies."""

    lm: LoadedModel
    device: torch.device
    dtype: torch.dtype
    scales: float | np.ndarray | None  # the multipliers s of 1/√d; None = the model as trained
    scale_source: str  # "uniform", "checkpoint", "none" or the --head-scales file
    schedule: Schedule | None  # --scale-schedule with the training length L
    train_len: int | None  # --train-len, else what the checkpoint declares

    def session(self, **capture) -> ScaleSession:
        """The context manager a forward runs in for this variant (ScaleSession's `capture` options:
        backend, fused, stats, ...): the toolkit's attention function at the variant's scales."""
        return ScaleSession(self.lm.model, scales=self.scales, schedule=self.schedule, **capture)

    def facts(self, record: str | Path | None = None) -> dict:
        """What a results file records about the model that ran (JSON types only), for the output at
        `record` (the checkpoint named from it: runs/provenance.py's `model_facts`; None: none written)."""
        lm, m = self.lm, self.scales
        uniform = m is None or isinstance(m, float)
        return {
            "model": lm.name,
            **model_facts(lm, record),
            "train_len": self.train_len,
            "scale_source": self.scale_source
            if record is None or self.scale_source in ("uniform", "checkpoint", "none")
            else beside_record(self.scale_source, record),
            "scales": (1.0 if m is None else float(m)) if uniform else np.asarray(m).tolist(),
            "schedule": None if self.schedule is None else dataclasses.asdict(self.schedule),
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(),
        }


def load_model_variant(config) -> ModelVariant:
    """The checkpoint of `config` (Checkpoint, Loading and Scaling settings) as its variant runs: see the
    module docstring. EntropyLensError, naming the fix, for anything it cannot load or apply."""
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    lm = load_variant(config, device, dtype)
    scales, scale_source = attention_scales(config, lm)
    schedule = variant_schedule(config, lm)
    train_len = config.train_len if config.train_len is not None else lm.train_len
    return ModelVariant(lm, device, dtype, scales, scale_source, schedule, train_len)
