"""An interrupted training run's checkpoint (`<out>.partial/checkpoint.pt`): tensors and plain data only.

    write_checkpoint({"recipe": {...}, "step": 100, "log": [...], "wall_s": 12.5,
                      "model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    state = read_checkpoint(path)   # the same dict, or EntropyLensError in one line

The file is training/resumable.py's (shared with search-heads): read with `torch.load(weights_only=True)`,
its keys and their types (FIELDS) checked before anything uses them, written atomically.
"""

from __future__ import annotations

from pathlib import Path

from entropy_lens.training import resumable
from entropy_lens.training.resumable import write_checkpoint

__all__ = ["FIELDS", "read_checkpoint", "write_checkpoint"]

FIELDS = {"recipe": dict, "step": int, "log": list, "wall_s": (int, float), "model": dict, "optimizer": dict}


def read_checkpoint(path: Path) -> dict:
    """The state `write_checkpoint` saved; anything else is refused in one line, before it is used."""
    return resumable.read_checkpoint(path, FIELDS, what="train-tiny", start_over="train from the start")
