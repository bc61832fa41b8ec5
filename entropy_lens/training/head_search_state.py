"""search-heads' checkpoint: `<out>.partial/`, the one owner of an interrupted search's identity.

    ckpt = SearchCheckpoint(out, config, force=False, progress=True)   # before any work: resume or refuse
    start, log, prior_s = ckpt.restore(scales, optimizer)             # 0, [], 0.0 for a fresh search
    prior = ckpt.prior_history(monitor)                               # the interrupted run's records
    ckpt.save(step, scales=..., optimizer=..., log=..., wall_s=..., history=...)
    discard_checkpoint(out)                                           # once the outputs are written

The folder holds `checkpoint.pt` (training/resumable.py's file: the scales Parameter, the AdamW state, the
step, the loss log, the wall time and the config as a dict, its identity, and under --monitor a note of
the steps its history recorded) and, under --monitor, `history.npz` (the monitor's history so far;
written first, so a kill between the two leaves records past the checkpoint, dropped on resume, never a
gap; what a resume keeps of it: training/resumable.py). A rerun of the same flags continues from it; other
flags are refused in one line naming the first that differs; `force` discards it. The windows of step t
are drawn from (seed, t) and the update is saved only whole, so a resumed search is bit-identical to an
uninterrupted one (tests/runs/test_head_search_resume.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor import History
from entropy_lens.runs.configs import HeadSearchConfig
from entropy_lens.settings import first_difference
from entropy_lens.training.resumable import (
    HISTORY_NOTE,
    history_note,
    prior_history,
    read_checkpoint,
    write_checkpoint,
)

__all__ = ["CHECKPOINT", "HISTORY", "SearchCheckpoint", "checkpoint_folder", "discard_checkpoint"]

CHECKPOINT, HISTORY = "checkpoint.pt", "history.npz"
FIELDS = {
    "config": dict,
    "step": int,
    "log": list,
    "wall_s": (int, float),
    "scales": torch.Tensor,
    "optimizer": dict,
}


def checkpoint_folder(out: str | Path) -> Path:
    """Where an interrupted search's checkpoint goes: `<out>.partial/` beside `out`."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def discard_checkpoint(out: str | Path) -> None:
    """Remove `<out>.partial/`: the search's outputs are written."""
    shutil.rmtree(checkpoint_folder(out), ignore_errors=True)


class SearchCheckpoint:
    """The checkpoint of one search (`out` None: nothing is saved, a search as before). `every`: also
    save every `every` steps (default: every tenth of --steps), besides on Ctrl-C and SIGTERM."""

    def __init__(
        self,
        out: str | Path | None,
        config: HeadSearchConfig,
        *,
        force: bool = False,
        progress: bool = True,
        every: int | None = None,
    ):
        self.config, self.progress = config, progress
        self.every = every if every is not None else max(1, config.steps // 10)
        self.work = None if out is None else checkpoint_folder(out)
        self.state = self._open(force) if self.work is not None else None

    def _open(self, force: bool) -> dict | None:
        """The checkpoint to continue from (None: start over), read and checked before any work."""
        work, path = self.work, self.work / CHECKPOINT
        if work.exists() and not work.is_dir():
            raise EntropyLensError(
                f"{work} is a file where search-heads keeps its checkpoint; move it or pass another --out"
            )
        if work.exists() and (force or not path.is_file()):
            if path.is_file():
                print(
                    f"entropy-lens: discarded the interrupted search in {work} (--force starts over)",
                    flush=True,
                )
            shutil.rmtree(work)  # a search with no checkpoint yet has nothing to resume
            return None
        if not path.is_file():
            return None
        state = read_checkpoint(path, FIELDS, what="search-heads", start_over="search from the start")
        differs = first_difference(
            self.config.to_dict(), state["config"], cls=HeadSearchConfig, names=("here", "in the checkpoint")
        )
        if differs is not None:
            raise EntropyLensError(
                f"{work} holds an interrupted search with other flags ({differs}); rerun with its flags to "
                "finish it, or pass --force to discard it"
            )
        if self.progress:
            print(
                f"entropy-lens: resuming the interrupted search in {work} at step {state['step']}", flush=True
            )
        return state

    @property
    def start(self) -> int:
        """The steps already done (0: a fresh search)."""
        return 0 if self.state is None else self.state["step"]

    def restore(self, scales: torch.nn.Parameter, optimizer) -> tuple[int, list[dict], float]:
        """Load the checkpoint into `scales` and `optimizer`: (steps done, loss log, wall seconds so far)."""
        if self.state is None:
            return 0, [], 0.0
        saved = self.state["scales"]
        if saved.shape != scales.shape:
            raise EntropyLensError(
                f"{self.work / CHECKPOINT} holds {tuple(saved.shape)} scales, not this model's "
                f"{tuple(scales.shape)}; pass --force to search from the start"
            )
        with torch.no_grad():
            scales.copy_(saved)
        optimizer.load_state_dict(self.state["optimizer"])
        return self.state["step"], list(self.state["log"]), float(self.state["wall_s"])

    def prior_history(self, monitor) -> History | None:
        """The interrupted search's --monitor history (training/resumable.py), for `monitor` to continue."""
        if self.state is None:
            return None
        note = self.state.get(HISTORY_NOTE)
        return prior_history(self.work / HISTORY, monitor, self.start, note=note, progress=self.progress)

    def due(self, step: int) -> bool:
        """Whether to save after `step` on the way (every `every` steps; the last step is the output)."""
        return self.work is not None and step % self.every == 0 and step < self.config.steps

    def save(
        self,
        step: int,
        *,
        scales: torch.nn.Parameter,
        optimizer,
        log: list[dict],
        wall_s: float,
        history: History | None,
    ) -> None:
        """The checkpoint after `step` (the last whole one); nothing when no step ran since the (re)start,
        after the last step (the outputs are written next), or without an `out`."""
        if self.work is None or step == self.start or step >= self.config.steps:
            return
        self.work.mkdir(parents=True, exist_ok=True)
        if history is not None:
            history.save(self.work / HISTORY)
        else:  # a history of an earlier part would leave a gap in a later --monitor's
            (self.work / HISTORY).unlink(missing_ok=True)
        state = {"config": self.config.to_dict(), "step": step, "log": log, "wall_s": wall_s}
        state |= history_note(history, step)
        state |= {"scales": scales.detach().cpu().clone(), "optimizer": optimizer.state_dict()}
        write_checkpoint(state, self.work / CHECKPOINT)
