"""What a resumable training loop shares (train-tiny, search-heads): its checkpoint file, the save on
Ctrl-C or SIGTERM, and the monitor's history carried across the interruption.

    write_checkpoint(state, path)                       # atomically: a kill while saving keeps the last one
    state = read_checkpoint(path, FIELDS, what="train-tiny", start_over="train from the start")
    with checkpoint_on_interrupt(lambda: None if updating else done, save): ...   # the loop
    state |= history_note(history, step)                          # which steps its history recorded
    prior = prior_history(path, monitor, start, note=state.get(HISTORY_NOTE), progress=True)
    joined(prior, monitor.history).save(path)                     # the interrupted run's, then this run's

A checkpoint is a file a user may receive (a shared run folder, a copied disk), so it is read with
`torch.load(weights_only=True)`: tensors, dicts, lists, numbers, strings and None, never a pickled
object that runs code on load. Its keys and their types (`fields`, the caller's table) are checked
before anything uses them. It is written to a temporary file and renamed, only over a regular file (never
a device or a FIFO a link points to); a write that fails (a full disk) is one line, and the checkpoint
already there stands.

An interrupt (cli turns SIGTERM into a KeyboardInterrupt) saves the last step whose update is whole
(weights, optimiser, log); one that lands mid-update saves nothing, so the checkpoint before stands and
a resumed run is still bit-identical to an uninterrupted one.

The monitor's history (--monitor) is written beside the checkpoint, before it, and the checkpoint notes
which steps it recorded (HISTORY_NOTE). A resume continues it when its statistics, as a set (any order),
and its --monitor-every are the interrupted run's; another --monitor is refused in one line, unless the
interrupted run recorded no step before its checkpoint (--monitor-every past the steps done): then any
--monitor starts a history of its own, as nothing recorded would be lost. A recorded statistic cannot be
dropped on resume (its records would be): --force starts over. A history of other layer or head counts,
or one that cannot be read, is refused with the fix (delete it, or --force). A history file that has gone
loses its records: said on stderr even under --quiet, and the history starts at the resumed step.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.monitor.settings import monitored
from entropy_lens.results import check_regular_target, printable
from entropy_lens.results.files import is_integer
from entropy_lens.results.history import History, load_history
from entropy_lens.runs.output import say

__all__ = [
    "HISTORY_NOTE",
    "checkpoint_on_interrupt",
    "history_note",
    "joined",
    "prior_history",
    "read_checkpoint",
    "write_checkpoint",
]

# a checkpoint's note of the monitor history written beside it (history_note): which steps it recorded,
# so that a resume whose history file has gone says what is lost; absent where the run did not monitor
HISTORY_NOTE = "history"


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
    if prior is None or not (len(prior) or len(prior.nonfinite)):
        return later
    return History(
        steps=np.concatenate([prior.steps, later.steps]),
        forwards=np.concatenate([prior.forwards, later.forwards]),
        rows=np.concatenate([prior.rows, later.rows]),
        values={s: np.concatenate([prior.values[s], later.values[s]]) for s in later.stats},
        meta=later.meta,
        nonfinite=np.concatenate([prior.nonfinite, later.nonfinite]),
        sequences=np.concatenate([prior.sequences, later.sequences]),
    )


def history_note(history: History | None, step: int) -> dict:
    """What a checkpoint after `step` keeps of the monitor history written beside it, to merge into its
    state: {HISTORY_NOTE: {"records": n, "first": s, "last": s}} (the records up to `step`), {} without
    a monitor."""
    if history is None:
        return {}
    steps = [int(s) for s in history.steps if s <= step]
    first, last = (steps[0], steps[-1]) if steps else (0, 0)
    return {HISTORY_NOTE: {"records": len(steps), "first": first, "last": last}}


def prior_history(path: Path, monitor, start: int, *, note, progress: bool) -> History | None:
    """The history an interrupted run kept at `path`, up to step `start` (the checkpoint's: records past
    it are dropped), for `monitor` (an AttentionMonitor) to continue; None when there is none to continue.
    `monitor` None: resumed without --monitor (a dropped record is said). `note`: the checkpoint's
    HISTORY_NOTE (None: it kept none). See the module docstring for what is refused and what is said."""
    if not start:
        return None
    if monitor is None:  # resumed without --monitor: the records it made are not carried on
        lost = _records(note) if path.is_file() else None
        if lost:
            say(
                f"resumed without --monitor, so the interrupted run's attention history ({lost}) is "
                "dropped; pass its --monitor to keep it"
            )
        return None
    fix = (
        f"delete {path} to resume with --monitor's history from step {start + 1}, or pass --force to "
        "start over"
    )
    if not path.is_file():
        lost = _records(note)
        if lost:  # a loss of recorded steps is said even under --quiet
            say(
                f"the interrupted run's attention history {path} is missing, and with it the {lost}; "
                f"--monitor's history starts at step {start + 1}"
            )
        elif progress:
            print(
                f"entropy-lens: the interrupted run kept no attention history; --monitor's history starts "
                f"at step {start + 1}",
                flush=True,
            )
        return None
    prior = load_history(path, again=fix)
    shape, kept = (monitor.n_layers, monitor.n_heads), (prior.meta["n_layers"], prior.meta["n_heads"])
    if kept != shape:
        raise EntropyLensError(
            f"{path} holds an attention history of {kept[0]} layers × {kept[1]} heads, not this model's "
            f"{shape[0]} × {shape[1]}; {fix}"
        )
    keep = prior.steps <= start
    if not keep.any():  # nothing recorded to continue: any --monitor and --monitor-every go on from here
        return None
    if set(prior.stats) != set(monitor.summaries) or prior.meta.get("every") != monitor.every:
        words = ",".join(monitored(prior.stats))  # received, not its summaries: --monitor's words
        raise EntropyLensError(
            f"the interrupted run monitored {words} every {prior.meta.get('every')} steps; "
            "pass its --monitor (those statistics, in any order) and --monitor-every to finish it, or "
            f"--force to start over (its records of steps {int(prior.steps[keep][0])}-{start} would be lost)"
        )
    return History(
        prior.steps[keep],
        prior.forwards[keep],
        prior.rows[keep],
        {s: v[keep] for s, v in prior.values.items()},
        prior.meta,
        prior.nonfinite[prior.nonfinite <= start],
        prior.sequences[keep],
    )


def _records(note) -> str | None:
    """The recorded steps a checkpoint's HISTORY_NOTE names, in words ("records of steps 2-6 (3)"); None
    for none, or for a note that is not one (a checkpoint is untrusted)."""
    if not isinstance(note, dict) or not all(is_integer(note.get(k)) for k in ("records", "first", "last")):
        return None
    n, first, last = note["records"], note["first"], note["last"]
    if n < 1:
        return None
    return f"record of step {first}" if n == 1 else f"records of steps {first}-{last} ({n})"
