"""What a resumable training loop shares (train-tiny, search-heads): its checkpoint file, the save on
Ctrl-C or SIGTERM, and the monitor's history carried across the interruption.

    write_checkpoint(state, path)                       # atomically: a kill while saving keeps the last one
    state = read_checkpoint(path, FIELDS, what="train-tiny", start_over="train from the start")
    with checkpoint_on_interrupt(lambda: None if updating else done, save): ...   # the loop
    prior = prior_history(path, monitor, start, progress=True)   # the interrupted run's records
    joined(prior, monitor.history).save(path)                     # ... followed by this run's

A checkpoint is a file a user may receive (a shared run folder, a copied disk), so it is read with
`torch.load(weights_only=True)`: tensors, dicts, lists, numbers, strings and None, never a pickled
object that runs code on load. Its keys and their types (`fields`, the caller's table) are checked
before anything uses them. It is written to a temporary file and renamed, only over a regular file (never
a device or a FIFO a link points to); a write that fails (a full disk) is one line, and the checkpoint
already there stands.

An interrupt (cli turns SIGTERM into a KeyboardInterrupt) saves the last step whose update is whole
(weights, optimiser, log); one that lands mid-update saves nothing, so the checkpoint before stands and
a resumed run is still bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.results import check_regular_target, printable
from entropy_lens.results.history import History, load_history

__all__ = ["checkpoint_on_interrupt", "joined", "prior_history", "read_checkpoint", "write_checkpoint"]


def write_checkpoint(state: dict, path: Path) -> None:
    """torch.save `state` to `path` through a temporary file and a rename; a target that is not a regular
    file is refused first, and a failed write (torch says a full disk with a RuntimeError of its
    inline_container, or an OSError) is one EntropyLensError: the checkpoint already there stands."""
    import torch

    check_regular_target(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        if isinstance(err, OSError):
            why = err.strerror or printable(err)
        else:  # torch's zip writer says a full disk as "[enforce fail at inline_container.cc:...]"
            why = f"torch's writer failed, as on a full disk: {printable(first_line(err))}"
        stands = "the last checkpoint stands" if path.is_file() else "no checkpoint was kept"
        raise EntropyLensError(
            f"could not write the checkpoint {path} ({why}): {stands}; free space on that disk (or make it "
            "writable) and rerun the same command to continue"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def read_checkpoint(path: Path, fields: dict, *, what: str, start_over: str) -> dict:
    """The state `write_checkpoint` saved, with each of `fields` ({key: type or tuple of types}) present
    and of its type (a "step" at least 0); anything else is refused in one line, before it is used.
    `what` names the command that writes it; `start_over` ends the fix ("pass --force to ...")."""
    import torch

    fix = f"delete {path.parent} or pass --force to {start_over}"
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise EntropyLensError(
            f"{path} holds Python objects other than tensors and plain data, which {what} never writes "
            f"and will not load ({str(err).strip().splitlines()[-1][:160]}); {fix}"
        ) from None
    except (OSError, RuntimeError, EOFError, ValueError) as err:
        raise EntropyLensError(
            f"{path} cannot be read as a checkpoint ({type(err).__name__}); {fix}"
        ) from None
    if not isinstance(state, dict):
        raise EntropyLensError(f"{path} is not a {what} checkpoint (a {type(state).__name__}); {fix}")
    for key, kind in fields.items():
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise EntropyLensError(
                f"{path} is not a {what} checkpoint (its {key!r} is missing or wrong); {fix}"
            )
    if "step" in fields and state["step"] < 0:
        raise EntropyLensError(f"{path} is not a {what} checkpoint (step {state['step']}); {fix}")
    return state


@contextlib.contextmanager
def checkpoint_on_interrupt(whole_step: Callable[[], int | None], save: Callable[[int], None]):
    """Ctrl-C or SIGTERM (cli turns it into a KeyboardInterrupt) inside the block: save the checkpoint of
    `whole_step()` (the last step whose update is whole; None: mid-update, the last checkpoint stands),
    then let the interrupt go on."""
    try:
        yield
    except KeyboardInterrupt:
        at = whole_step()
        if at is not None:
            save(at)
        raise


def joined(prior: History | None, later: History) -> History:
    """`prior`'s records (an interrupted run's) followed by `later`'s, under `later`'s meta."""
    if prior is None or not len(prior):
        return later
    return History(
        steps=np.concatenate([prior.steps, later.steps]),
        forwards=np.concatenate([prior.forwards, later.forwards]),
        rows=np.concatenate([prior.rows, later.rows]),
        values={s: np.concatenate([prior.values[s], later.values[s]]) for s in later.stats},
        meta=later.meta,
    )


def prior_history(path: Path, monitor, start: int, *, progress: bool) -> History | None:
    """The history an interrupted run kept at `path`, up to step `start` (the checkpoint's: records past
    it are dropped), for `monitor` (an AttentionMonitor) to continue; None when there is none to
    continue (said). Another --monitor or --monitor-every than the interrupted run's is refused."""
    if not start:
        return None
    if not path.is_file():
        if progress:
            print(
                f"entropy-lens: the interrupted run kept no attention history; --monitor's history starts "
                f"at step {start + 1}",
                flush=True,
            )
        return None
    prior = load_history(path)
    if list(prior.stats) != list(monitor.stats) or prior.meta.get("every") != monitor.every:
        raise EntropyLensError(
            f"the interrupted run monitored {','.join(prior.stats)} every {prior.meta.get('every')} steps; "
            "pass its --monitor and --monitor-every to finish it, or --force to start over"
        )
    keep = prior.steps <= start
    return History(
        prior.steps[keep],
        prior.forwards[keep],
        prior.rows[keep],
        {s: v[keep] for s, v in prior.values.items()},
        prior.meta,
    )
