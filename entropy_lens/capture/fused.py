"""Which way a capturing layer computes its output: sdpa + an entropy-only pass, or one fused pass.

    "separate"  torch sdpa (its flash kernels on GPU and CPU) for the output, then the entropy kernel
                on the same q, k: two passes over K (path "sdpa-then-entropy"; a layer with softcap
                or sinks, which sdpa cannot compute, runs "torch-streamed" this way).
    "fused"     output AND entropy from the same score tiles, one pass over K/V: on CUDA the Triton
                kernel's WITH_OUTPUT variant ("triton-fused"), on CPU the native C++ kernel
                ("native", built on first use) or, where it cannot build or `--backend torch_chunked`
                asks for it, torch_chunked's one pass ("torch-streamed", its elementwise step compiled
                on request, kernels/fold.py). `kernels.plan` names which.
These two ways are what "auto" chooses between and what `PathChoices` keeps; the path each way ran, as
named in capture/paths.py, is what the session and the results meta record.

`--fused` / `EntropyRecorder(fused=...)`: "off" always separate; "on" fused wherever it applies;
"auto" (default) measures both on the real work: the first calls of each shape run separate,
fused, separate, fused (the first of each a warm-up: compilation, Triton autotuning), every result
is used, and the faster of the two timed calls is kept, as `@triton.autotune` does for block sizes.
Where neither path compiles on its first call (CPU without ENTROPY_LENS_COMPILE=1: sdpa, the native
kernel and the eager fold are ready code) and a layer is big enough to time in one run
(`paths.ONE_RUN_MIN_SCORES`), each runs once, separate then fused, and the faster is kept:
a trial of the slower path costs a whole layer of the scan, so a warm-up of it would be paid for nothing.
No work is run only to be timed. What was measured and kept lives in a `PathChoices` state object: a
scan owns one, stores it in its checkpoint and records its choices in the results meta
(`fused_choices`), so a resumed scan continues with the paths the interrupted one chose.

Where the fused pass applies, and which kernel it is, is `kernels.plan`'s decision (capture/paths.py
asks it per layer): only where it computes exactly what the layer's output path would (no gradient
wanted, no dropout, and a kernel whose one pass takes the layer's mask and extras).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from entropy_lens.flags import Fused
from entropy_lens.kernels import FUSED_MODES

__all__ = ["FUSED_MODES", "PATHS", "PROCESS_CHOICES", "PathChoices", "wall_seconds"]

PATHS = ("separate", "fused")  # the order "auto" tries them in


class PathChoices:
    """What "auto" has measured and decided, by shape key: a state object that a scan owns, stores in
    its checkpoint and its results meta (`to_record`), and restores on resume (`from_record`), so a
    resumed scan takes the same path as the process it continues and ends with the same numbers.

    `timer(fn) -> (result, seconds)` times a trial (default `wall_seconds`); `replay` maps shape keys to
    the path to keep after the trials whatever they measure (a recorded run's `chosen`: its layers then
    take exactly the recorded run's paths, trials included, since trials run in a fixed order).
    Without a state object the attention function uses one per process (`PROCESS_CHOICES`)."""

    def __init__(self, *, timer=None, replay: dict[str, str] | None = None):
        self.timer = timer or wall_seconds
        self.replay = dict(replay or {})
        self.chosen: dict[str, str] = {}  # shape key -> "fused" | "separate", kept for the process
        self.trials: dict[str, dict[str, list[float]]] = {}  # shape key -> seconds of each path's runs

    def choose(
        self, mode: str, shape_key, run: dict[str, Callable[[], object]], *, runs: int = 2
    ) -> tuple[str, object]:
        """(path, its result) for `mode`: "off" runs `run["separate"]`, "on" `run["fused"]`; "auto" runs
        the path kept for `shape_key` or, until one is kept, the next trial: each path `runs` times in
        turn (2: a warm-up, then the timed run; 1 where neither compiles on its first call), every run a
        layer's real work, and the path whose last run was faster is kept."""
        if mode != Fused.AUTO:  # a Fused (or its name: the members are str-valued)
            path = "fused" if mode == Fused.ON else "separate"
            return path, run[path]()
        key = shape_key if isinstance(shape_key, str) else "|".join(map(str, shape_key))
        if key in self.chosen:
            path = self.chosen[key]
            return path, run[path]()
        trials = self.trials.setdefault(key, {name: [] for name in PATHS})
        path = min(PATHS, key=lambda name: len(trials[name]))  # fewest runs so far; ties in PATHS order
        result, seconds = self.timer(run[path])
        trials[path].append(seconds)
        if all(len(times) >= runs for times in trials.values()):
            fastest = min(PATHS, key=lambda name: trials[name][-1])
            self.chosen[key] = self.replay.get(key, fastest)
            del self.trials[key]
        return path, result

    def to_record(self) -> dict:
        """JSON-ready state: {"chosen": {key: path}, "trials": {key: {path: [seconds, ...]}}}."""
        return {"chosen": dict(self.chosen), "trials": {k: dict(v) for k, v in self.trials.items()}}

    @classmethod
    def from_record(cls, record: dict | None, *, timer=None) -> PathChoices:
        """The state `to_record` wrote (None or {}: a fresh one), to continue from."""
        choices = cls(timer=timer)
        record = record or {}
        choices.chosen = dict(record.get("chosen", {}))
        choices.trials = {
            k: {p: list(v.get(p, [])) for p in PATHS} for k, v in record.get("trials", {}).items()
        }
        return choices


def wall_seconds(fn) -> tuple[object, float]:
    """(fn(), its wall time in seconds), synchronising CUDA around it when CUDA is in use."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    if sync:
        sync()
    t0 = time.perf_counter()
    result = fn()
    if sync:
        sync()
    return result, time.perf_counter() - t0


PROCESS_CHOICES = PathChoices()  # sessions without a state object of their own: measured once per process
