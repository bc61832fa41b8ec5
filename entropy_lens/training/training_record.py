"""What the training.json beside a model made by `entropy-lens train-tiny` says about how it was trained.

    training_record("tiny-nope")        # the record, or None for a checkpoint without one
    training_steps("tiny-nope")         # optimiser steps (a snapshot's, the passkey phase included)
    passkey_phase_steps("tiny-nope")    # how many of them were the passkey phase

`training/` writes the file (training/tiny.py) and reads it back (--init-from, the model cards); the
figures' runs read the steps of a checkpoint (Figure 7). It lives here, in `runs`, below `training`, so
that both may import it; `models/` loads checkpoints and knows nothing of training files.
"""

from __future__ import annotations

import json
from pathlib import Path

from entropy_lens.models import resolve_ckpt

__all__ = [
    "TRAINING_RECORD",
    "passkey_phase_steps",
    "read_training_record",
    "training_record",
    "training_steps",
]

TRAINING_RECORD = "training.json"  # beside the weights: the recipe, the loss log, wall time, snapshot_step


def read_training_record(folder: str | Path) -> dict:
    """The training.json of a train-tiny `folder` (OSError when there is none, ValueError when it is no
    JSON)."""
    return json.loads((Path(folder) / TRAINING_RECORD).read_text())


def training_record(ckpt: str) -> dict | None:
    """The training.json beside `ckpt`'s weights (models made by `entropy-lens train-tiny`), else None."""
    source = resolve_ckpt(str(ckpt))
    found = source.is_dir() and (source / TRAINING_RECORD).is_file()
    return read_training_record(source) if found else None


def training_steps(ckpt: str) -> int | None:
    """How many optimiser steps `ckpt` was trained for, where a training.json beside its weights says
    (models made by `entropy-lens train-tiny`: snapshots, and the passkey phase included); None when
    nothing says."""
    facts = training_record(ckpt)
    return None if facts is None else _steps(facts)


def _steps(facts: dict) -> int:
    recipe = facts["recipe"]
    return int(facts.get("snapshot_step") or recipe["steps"] + recipe.get("passkey_steps", 0))


def passkey_phase_steps(ckpt: str) -> int | None:
    """How many of `ckpt`'s `training_steps` were train-tiny's passkey phase (`--passkey-steps`, after
    pretraining): 0 for a model or snapshot without one; None when nothing says."""
    facts = training_record(ckpt)
    if facts is None:
        return None
    return max(0, _steps(facts) - facts["recipe"]["steps"])
