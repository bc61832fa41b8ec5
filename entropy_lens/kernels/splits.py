"""How a decode step's Triton launch is sized (torch only): `decode_splits`, the number of key splits
triton_decode.py runs for a few query rows on a long cache, asked by `plan.run` for the "triton"
kernel; 1 keeps the row kernel (triton_entropy.py).

The row kernel gives each (batch·head, block of query rows) one program: at T = 1 and B·Hq = 32 that is
32 programs, on a GPU of 132 SMs, each streaming the whole cache alone. Splitting the keys gives every
(batch·head) `splits` programs and one combine; more splits fill the GPU but each streams fewer keys
and the combine reads more partial states. The heuristic: enough programs for SPLIT_WAVES per SM, no
split below SPLIT_MIN_KEYS keys, at most MAX_SPLITS. Its constants are guesses a GPU run tunes
(benchmarks/decode_gpu.py times the split launch against the row kernel at 4K/16K/32K).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from entropy_lens.kernels.mods import ScoreMods

DECODE_ROWS = 16  # the query rows one split program holds (its BLOCK_M: tl.dot takes no fewer than 16)
SPLIT_MIN_KEYS = 256  # keys a split streams at least
SPLIT_WAVES = 4  # programs per SM the splits aim at
MAX_SPLITS = 64
INTERPRETER_SMS = 132  # the SMs the interpreter (no GPU) decides for: an H100 or H200
_FORCED: list[int] = []  # the split counts `forced_splits` holds, innermost last


def decode_splits(q, k, mods: ScoreMods) -> int:
    """The key splits of the Triton kernel's launch for queries q on keys k: for at most DECODE_ROWS query
    rows on a cache (S > T), as many as give the GPU SPLIT_WAVES programs per SM, each split streaming at
    least SPLIT_MIN_KEYS of the keys the rows see; 1 (the row kernel) otherwise. Every modifier of the
    row kernel runs split too, so the shape alone decides.

    Args:
        q: (B, Hq, T, D) queries.
        k: (B, Hkv, S, D) keys.
        mods: the ScoreMods in the Triton kernel's form (a window narrows the keys the rows see).

    Returns:
        int: the splits, 1 to MAX_SPLITS (inside `forced_splits(n)`, n).
    """
    (B, Hq, T), S = q.shape[:3], k.shape[2]
    if _FORCED and T <= DECODE_ROWS:
        return _FORCED[-1]
    if T > DECODE_ROWS or S <= T or B * Hq == 0:
        return 1
    keys = min(S, mods.window + T - 1) if mods.causal and mods.window is not None else S
    programs = SPLIT_WAVES * _multiprocessors(q.device)
    return max(1, min(-(-programs // (B * Hq)), keys // SPLIT_MIN_KEYS, MAX_SPLITS))


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    """The SMs of a CUDA device; INTERPRETER_SMS elsewhere (the interpreter decides as an H100 would)."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


@contextlib.contextmanager
def forced_splits(splits: int):
    """Every `decode_splits` inside gives `splits` for at most DECODE_ROWS query rows (1: the row kernel),
    whatever the shape: benchmarks/decode_gpu.py times the row kernel and each split count with it.

    Args:
        splits: the key splits, >= 1.

    Raises:
        ValueError: splits < 1.
    """
    if splits < 1:
        raise ValueError(f"forced_splits({splits}): give 1 (the row kernel) or more splits")
    _FORCED.append(int(splits))
    try:
        yield
    finally:
        _FORCED.pop()


__all__ = ["DECODE_ROWS", "decode_splits", "forced_splits"]
