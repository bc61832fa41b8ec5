"""`--threads N`: how many CPU threads torch computes with, set once before a command loads a model.

torch's default is one OpenMP thread per core. On a machine where another process keeps a core busy,
that default is several times slower than fewer threads: at the end of every parallel region OpenMP
threads spin-wait for the slowest of them, and a thread that shares its core with the other process
holds all of them up (benchmarks/threads_cpu.py measures it: docs/internals/benchmarks.md, "Threads"). Setting the
count is the fix: `--threads N` (or `OMP_NUM_THREADS=N`) with N at most the cores that are free.

`set_threads` writes the OpenMP/MKL environment variables (read by libraries that start their thread
pools later) and calls `torch.set_num_threads`; without N it changes nothing, so OMP_NUM_THREADS and
torch's own default keep working. The count that ran is recorded in each results file (meta
`threads`).

N has a hard ceiling, `max_threads()`: THREADS_PER_CORE (4) threads per core of the machine
(os.cpu_count()), checked before anything starts (`check_threads`; the flag's argparse type and
`set_threads` both call it). More threads than cores is already slower (the warning below); four times
as many is never useful, and the ceiling keeps a typo (--threads 100000, which runs torch's pools out
of memory: a MemoryError or a segfault) from reaching OpenMP. It follows the machine rather than a fixed
number because the count that breaks a pool does: thread stacks and the system's per-user limit.
"""

from __future__ import annotations

import os
import sys

from entropy_lens.errors import EntropyLensError

__all__ = [
    "THREADS_PER_CORE",
    "THREAD_VARIABLES",
    "available_cores",
    "check_threads",
    "max_threads",
    "set_threads",
    "torch_threads",
]

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
THREADS_PER_CORE = 4  # the ceiling of --threads, per core of the machine (module docstring)


def max_threads() -> int:
    """The most threads --threads may ask for: THREADS_PER_CORE per core of the machine."""
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def check_threads(n: int) -> None:
    """EntropyLensError in one line unless 1 <= n <= max_threads()."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise EntropyLensError(f"--threads must be a whole number (got {n!r}); omit it for torch's default")
    if n < 1:
        raise EntropyLensError(f"--threads must be at least 1 (got {n}); omit it for torch's default")
    if n > max_threads():
        raise EntropyLensError(
            f"--threads {n} is above the ceiling of {max_threads()} ({THREADS_PER_CORE} per core of this "
            f"machine's {os.cpu_count() or 1}); pass --threads {available_cores()} or fewer (the cores this "
            "process may use), or omit it for torch's default"
        )


def set_threads(n: int | None) -> None:
    """Use `n` CPU threads from now on (None: leave the default as it is)."""
    if n is None:
        return
    check_threads(n)
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
