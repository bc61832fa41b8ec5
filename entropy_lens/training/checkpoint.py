"""An interrupted training run's checkpoint (`<out>.partial/checkpoint.pt`): tensors and plain data only.

    write_checkpoint({"recipe": {...}, "step": 100, "log": [...], "wall_s": 12.5,
                      "model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    state = read_checkpoint(path)   # the same dict, or EntropyLensError in one line

A checkpoint is a file a user may receive (a shared run folder, a copied disk), so it is read with
`torch.load(weights_only=True)`: tensors, dicts, lists, numbers, strings and None, never a pickled
object that runs code on load. Its keys and their types are checked before anything uses them. It
is written to a temporary file and renamed, so a kill while saving leaves the previous checkpoint.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from entropy_lens.errors import EntropyLensError

__all__ = ["read_checkpoint", "write_checkpoint"]

FIELDS = {"recipe": dict, "step": int, "log": list, "wall_s": (int, float), "model": dict, "optimizer": dict}


def write_checkpoint(state: dict, path: Path) -> None:
    import torch

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_checkpoint(path: Path) -> dict:
    """The state `write_checkpoint` saved; anything else is refused in one line, before it is used."""
    import torch

    fix = f"delete {path.parent} or pass --force to train from the start"
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise EntropyLensError(
            f"{path} holds Python objects other than tensors and plain data, which train-tiny never writes "
            f"and will not load ({str(err).strip().splitlines()[-1][:160]}); {fix}"
        ) from None
    except (OSError, RuntimeError, EOFError, ValueError) as err:
        raise EntropyLensError(
            f"{path} cannot be read as a checkpoint ({type(err).__name__}); {fix}"
        ) from None
    if not isinstance(state, dict):
        raise EntropyLensError(f"{path} is not a train-tiny checkpoint (a {type(state).__name__}); {fix}")
    for key, kind in FIELDS.items():
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise EntropyLensError(
                f"{path} is not a train-tiny checkpoint (its {key!r} is missing or wrong); {fix}"
            )
    if state["step"] < 0:
        raise EntropyLensError(f"{path} is not a train-tiny checkpoint (step {state['step']}); {fix}")
    return state
