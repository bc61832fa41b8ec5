"""`--threads N`: how many CPU threads torch computes with, set once before a command loads a model.

torch's default is one OpenMP thread per core. On a machine where another process keeps a core busy,
that default is several times slower than fewer threads: at the end of every parallel region OpenMP
threads spin-wait for the slowest of them, and a thread that shares its core with the other process
holds all of them up (benchmarks/threads_cpu.py measures it; README, "Shared machines"). Setting the
count is the fix: `--threads N` (or `OMP_NUM_THREADS=N`) with N at most the cores that are free.

`set_threads` writes the OpenMP/MKL environment variables (read by libraries that start their thread
pools later) and calls `torch.set_num_threads`; without N it changes nothing, so OMP_NUM_THREADS and
torch's own default keep working. The count that ran is recorded in each results file (meta
`threads`).
"""

from __future__ import annotations

import os
import sys

from entropy_lens.errors import EntropyLensError

__all__ = ["THREAD_VARIABLES", "available_cores", "set_threads", "torch_threads"]

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def set_threads(n: int | None) -> None:
    """Use `n` CPU threads from now on (None: leave the default as it is)."""
    if n is None:
        return
    if n < 1:
        raise EntropyLensError(f"--threads must be at least 1 (got {n}); omit it for torch's default")
    cores = available_cores()
    if n > cores:
        print(
            f"entropy-lens: warning: --threads {n} is more than the {cores} cores this process may use; "
            f"threads beyond them wait for each other and slow the run down: pass --threads {cores} or fewer",
            file=sys.stderr,
            flush=True,
        )
    for name in THREAD_VARIABLES:
        os.environ[name] = str(n)
    import torch

    torch.set_num_threads(n)


def available_cores() -> int:
    """The cores this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def torch_threads() -> int:
    """The intra-op thread count torch uses now."""
    import torch

    return torch.get_num_threads()
