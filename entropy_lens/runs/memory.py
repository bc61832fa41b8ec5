"""Hand the C heap's free pages back to the system: after each layer's attention of a CPU forward
(`free_heap_returned_per_layer`) and between a scan's forward and its loss (`release_free_heap`).

glibc keeps the memory a CPU forward frees (blocks under its mmap threshold, which grows to 32 MB as
large blocks are freed) in its heap, where fragmentation can keep it resident; the chunked loss's
logits then come on top. Returned after every layer, what the heap keeps is at most one layer's churn.
`malloc_trim(0)` returns every free page of the heap. Where the C library has no `malloc_trim` (not
glibc), it does nothing.

Inside a layer the heap still keeps the blocks of its tensors: glibc raises its mmap threshold to the
size of each large block freed (up to 32 MB), after which tensors of a few to 32 MB (a sharded rank's
hidden states and queries at 16K) come from the heap and their freed holes stay resident until the next
trim. `large_blocks_returned` fixes the threshold at LARGE_BLOCK instead (`mallopt(M_MMAP_THRESHOLD)`,
for the rest of the process: glibc cannot give the dynamic threshold back), so a block that large,
where the heap holds no free one to reuse, is mapped for itself and unmapped when freed, at some cost
in time. What each saves and costs, measured: docs/internals/layout.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools

import torch

LARGE_BLOCK = 1 << 20  # bytes: blocks from this size up are mapped for themselves during a CPU scan
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


@functools.cache
def large_blocks_returned() -> bool:
    """Fix glibc's mmap threshold at LARGE_BLOCK for the rest of the process (module docstring), once;
    False where the C library has no `mallopt` (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK))


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


@contextlib.contextmanager
def free_heap_returned_per_layer(model: torch.nn.Module):
    """While inside, each attention module of a CPU `model` (the innermost modules carrying a
    `layer_idx`, as transformers' attention modules and ours do) returns the free heap after its
    forward. Nothing where the model is not on CPU or the C library cannot trim. Yields the number of
    modules hooked; the hooks are removed on exit, whatever happens."""
    hooked = []
    parameter = next(model.parameters(), None)
    if _malloc_trim() is not None and parameter is not None and parameter.device.type == "cpu":
        hooked = attention_modules(model)
    handles = [m.register_forward_hook(_release_after) for m in hooked]
    try:
        yield len(handles)
    finally:
        for handle in handles:
            handle.remove()


def _release_after(module, args, output) -> None:  # a forward hook: None keeps the module's output
    release_free_heap()


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's attention modules, one per layer, in order: the innermost modules carrying a
    `layer_idx`, as transformers' attention modules and ours do."""
    return [m for m in model.modules() if _innermost_layer(m)]


def _innermost_layer(module: torch.nn.Module) -> bool:
    return hasattr(module, "layer_idx") and not any(
        hasattr(m, "layer_idx") for m in module.modules() if m is not module
    )
