"""runs.memory: the free heap a forward leaves is handed back, after each layer and before the loss."""

from __future__ import annotations

import platform

import pytest
import torch

from entropy_lens.runs import memory
from entropy_lens.runs.memory import free_heap_returned_per_layer, release_free_heap


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


GLIBC = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="needs glibc"
)


@GLIBC
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


class _Attention(torch.nn.Module):
    def __init__(self, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


class _Layer(torch.nn.Module):  # carries a layer_idx too, as some decoder layers do: not hooked
    def __init__(self, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.attn = _Attention(layer_idx)

    def forward(self, x):
        return self.attn(x) + 1


@GLIBC
def test_each_attention_module_returns_the_free_heap_after_its_forward_and_the_hooks_leave(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append("release") or True)
    model = torch.nn.Sequential(_Layer(0), _Layer(1), _Layer(2))
    x = torch.randn(2, 4)
    want = model(x)
    with pytest.raises(RuntimeError, match="inside"), free_heap_returned_per_layer(model) as hooked:
        assert hooked == 3  # the attention modules, not the layers around them
        got = model(x)
        assert calls == ["release"] * 3
        assert torch.equal(got, want)  # the hook keeps each module's output
        raise RuntimeError("inside")
    model(x)
    assert calls == ["release"] * 3  # removed on the way out, even after an error
    assert all(not m._forward_hooks for m in model.modules())


def test_a_model_off_the_cpu_or_without_layers_is_not_hooked():
    with free_heap_returned_per_layer(torch.nn.Sequential(_Layer(0)).to("meta")) as hooked:
        assert hooked == 0
    with free_heap_returned_per_layer(torch.nn.Linear(2, 2)) as hooked:
        assert hooked == 0


CHILD = """
import torch
from entropy_lens.runs.memory import LARGE_BLOCK, large_blocks_returned

def anon():
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))

if {fixed}:
    assert large_blocks_returned() is True and large_blocks_returned() is True  # once per process
size = 4 * LARGE_BLOCK
for _ in range(3):  # blocks of this size freed before: glibc's own threshold rises above them
    block = torch.ones(size // 4)
    del block
block = torch.ones(size // 4)  # float32: `size` bytes, touched
before = anon()
del block
print((before - anon()) / size)
"""


@GLIBC
@pytest.mark.slow  # two child processes
def test_large_blocks_are_unmapped_when_freed_after_large_blocks_returned():
    """With the threshold fixed (runs/memory.py), a freed block of a few MB leaves the resident memory at
    once; with glibc's own threshold it stays in the heap. In a fresh process each: what the heap holds
    already decides where a block comes from."""
    import subprocess
    import sys

    def returned(fixed: bool) -> float:
        code = CHILD.format(fixed=fixed)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        return float(done.stdout.strip())

    assert returned(True) >= 0.9
    assert returned(False) < 0.1
