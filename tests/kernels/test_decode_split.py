"""The decode step's split-key launch (kernels/triton_decode.py) and its sizing (kernels/splits.py).

Without a GPU: how many splits `decode_splits` gives each shape (torch only), the launcher's refusals, and,
in a child process under TRITON_INTERPRET=1, tests/triton_decode_interp_cases.py (the launch against
float64). On a GPU that file's `gpu` cases compare it with the row kernel at a 16K and 32K cache
(benchmarks/gpu_checks.sh's decode stage).
"""

import importlib.util
from pathlib import Path

import pytest
import torch
from kernel_cases import make_inputs
from triton_interp_plugin import run_under_the_interpreter

from entropy_lens.kernels import ScoreMods, decode_splits
from entropy_lens.kernels.splits import (
    DECODE_ROWS,
    INTERPRETER_SMS,
    MAX_SPLITS,
    SPLIT_MIN_KEYS,
    SPLIT_WAVES,
    forced_splits,
)

HERE = Path(__file__).parents[1]  # tests/, where the case files are
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


def _splits(B, Hq, T, S, **mods) -> int:
    q, k = make_inputs(B, Hq, 1, T, S, D=4)
    return decode_splits(q, k, ScoreMods.build(q, k, **mods))


def test_a_decode_step_on_a_long_cache_splits_to_fill_the_gpu():
    """T = 1 on 16K keys, TinyLlama's 32 heads: the splits give SPLIT_WAVES programs per SM (132 SMs off a
    GPU); fewer heads take more splits, up to MAX_SPLITS."""
    programs = SPLIT_WAVES * INTERPRETER_SMS
    assert _splits(1, 32, 1, 16384) == -(-programs // 32)
    assert _splits(2, 32, 1, 16384) == -(-programs // 64)
    assert _splits(1, 4, 1, 32768) == MAX_SPLITS
    assert _splits(1, 32, DECODE_ROWS, 16384) > 1  # a few rows (speculative decoding) split too


def test_short_caches_windows_and_many_rows_keep_the_row_kernel():
    """Each split streams SPLIT_MIN_KEYS keys at least: a short cache, or a window, splits less or not at
    all; more than DECODE_ROWS rows, a prefill (S = T) or a batch that fills the GPU keep the row kernel."""
    assert _splits(1, 32, 1, 3 * SPLIT_MIN_KEYS) == 3
    assert _splits(1, 32, 1, SPLIT_MIN_KEYS - 1) == 1
    assert _splits(1, 32, 1, 16384, window=4 * SPLIT_MIN_KEYS) == 4  # the window's keys, not the cache's
    assert _splits(1, 32, 1, 16384, causal=False) == _splits(1, 32, 1, 16384)
    assert _splits(1, 32, DECODE_ROWS + 1, 16384) == 1
    assert _splits(1, 32, 512, 512) == 1
    assert _splits(64, 32, 1, 16384) == 1  # 2,048 programs already


def test_forced_splits_hold_inside_the_block_for_few_rows_only():
    """benchmarks/decode_gpu.py's seam: the innermost count inside, the heuristic again after; more than
    DECODE_ROWS rows keep the row kernel whatever is forced."""
    with forced_splits(1):
        assert _splits(1, 32, 1, 16384) == 1
        with forced_splits(7):
            assert _splits(1, 4, 1, 100) == 7 and _splits(1, 32, DECODE_ROWS + 1, 16384) == 1
        assert _splits(1, 32, 1, 16384) == 1
    assert _splits(1, 32, 1, 16384) > 1
    with pytest.raises(ValueError, match="give 1 .the row kernel. or more"), forced_splits(0):
        pass


@needs_triton
def test_the_launch_refuses_in_one_line():
    from entropy_lens.kernels.triton_decode import row_stats_split

    q, k = make_inputs(1, 2, 1, DECODE_ROWS + 1, 40)
    with pytest.raises(ValueError, match="at most 16 query rows.*row_stats_triton"):
        row_stats_split(q, k, None, torch.ones(2), ScoreMods.build(q, k), splits=2)
    q, k = make_inputs(1, 2, 1, 1, 40)
    with pytest.raises(ValueError, match="splits >= 1"):
        row_stats_split(q, k, None, torch.ones(2), ScoreMods.build(q, k), splits=0)
    bias = ScoreMods.build(q, k, key_bias=torch.zeros(1, 2, 40))
    with pytest.raises(ValueError, match="no key bias; run it with backend='torch_chunked'"):
        row_stats_split(q, k, None, torch.ones(2), bias, splits=2)


@pytest.mark.slow
@needs_triton
def test_split_launch_under_the_interpreter():
    """tests/triton_decode_interp_cases.py in its own process under TRITON_INTERPRET=1."""
    run_under_the_interpreter([HERE / "triton_decode_interp_cases.py"])
