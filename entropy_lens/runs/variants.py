"""A run's model variant, shared by scans, passkey runs and head searches: the checkpoint as its flags
load it, the attention scales it is scanned at and its position schedule."""

from __future__ import annotations

from pathlib import Path

import torch

from entropy_lens.capture import Schedule, check_supported, parse_schedule
from entropy_lens.errors import EntropyLensError
from entropy_lens.models import LoadedModel, load_head_scales_file, load_model, validate_head_scales

__all__ = ["attention_scales", "load_variant", "variant_schedule"]


def load_variant(config, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """The checkpoint of a config with the Checkpoint and Loading settings (a scan's, a passkey run's, a head search's)
    as its flags load it (--nope, --rope-scaling, --revision, ...); refused when the capture cannot run it."""
    lm = load_model(
        config.model,
        dtype=dtype,
        device=device,
        nope=config.nope,
        rope_scaling=config.rope_scaling,
        revision=config.revision,
        trust_remote_code=config.trust_remote_code,
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
