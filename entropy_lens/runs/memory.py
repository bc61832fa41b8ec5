"""Hand the C heap's free pages back to the system between a scan's forward and its loss.

glibc keeps the memory a CPU forward frees (blocks under its mmap threshold, which grows to 32 MB as
large blocks are freed) in its heap, where fragmentation can keep hundreds of MB resident; the
chunked loss's logits then come on top. Repeated scans of SmolLM2 in one process peaked up to
~400 MB above their first sample that way (benchmarks/scan_cpu.py, README "Speed on CPU").
`malloc_trim(0)` returns every free page of the heap (tens of ms per call at 4K tokens). Where the C
library has no `malloc_trim` (not glibc), it does nothing.
"""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc, or no process handle (Windows)
        return None


def release_free_heap() -> bool:
    """Return the C heap's free pages to the system; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
