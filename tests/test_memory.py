"""runs.memory: the free heap a forward leaves is handed back before the loss."""

from __future__ import annotations

import platform

import pytest
import torch

from entropy_lens.runs.memory import release_free_heap


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="needs glibc")
def test_returns_free_pages_that_a_live_block_above_them_pins():
    # 64 KB blocks come from the heap (below any mmap threshold); the last one stays alive and pins
    # the top, so free() cannot trim the 120 MB freed beneath it: only malloc_trim returns them.
    blocks = [torch.ones(16 * 1024) for _ in range(1920)]
    pin = blocks[-1]
    del blocks
    before = _resident_mb()
    assert release_free_heap() is True
    after = _resident_mb()
    assert before - after > 60, f"resident {before:.0f} MB -> {after:.0f} MB"
    assert pin.sum().item() == 16 * 1024  # the live block is untouched
