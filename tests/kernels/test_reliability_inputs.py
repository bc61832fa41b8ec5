"""Issue 65's kernel items: a block size that is not a positive integer is refused at every public entry
(item 3: −5 gave zeros, −1 on the row pass uninitialised memory, 0 a bare range() error); scores beyond
float32's range are refused, never read as finite numbers (item 4: native's received summed to 7 of 10,
max_prob 8.5e37); the reference on T = 0 or S = 0, `received_from_lse`'s rows and a NaN lse (item 7)."""

from functools import partial

import numpy as np
import pytest
import torch
from kernel_cases import make_inputs, make_sinks

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import ALL
from entropy_lens.kernels import (
    ScoreMods,
    attention_entropy,
    attention_received,
    attention_stats,
    attention_with_entropy,
    native_available,
    received_from_lse,
    run,
)
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.received import received_state, row_log_sum_exp
from entropy_lens.statistics import KEY_STATISTICS

CPU = ["reference", "torch_chunked"] + (["native"] if native_available() else [])
KERNELS = ["torch_chunked"] + (["native"] if native_available() else [])
BAD_BLOCKS = [-5, -1, 0, True, 2.5, "4", None.__class__]


def _entries(q, k, block):
    """Every public entry that takes a tile, each bound (functools.partial) with `block` as one of its sizes."""
    v = torch.randn(k.shape)
    scale = validate_scale(q, k, 0.3)
    mods = ScoreMods.build(q, k)
    lse = row_log_sum_exp("torch_chunked", q, k, scale, mods)
    for name in ("block_q", "block_k"):
        for backend in KERNELS:
            kw = {name: block, "backend": backend}
            yield partial(attention_entropy, q, k, softmax_scale=0.3, **kw)
            yield partial(attention_stats, q, k, softmax_scale=0.3, stats=ALL, **kw)
            yield partial(attention_with_entropy, q, k, v, softmax_scale=0.3, **kw)
            yield partial(attention_received, q, k, softmax_scale=0.3, **kw)
            yield partial(received_from_lse, q, k, lse, scale, mods, **kw)
            yield partial(received_state, q, k, lse, scale, mods, **kw)
            yield partial(run, backend, q, k, None, scale, mods, **{name: block})
        yield partial(attention_received, q, k, softmax_scale=0.3, backend="reference", **{name: block})


@pytest.mark.parametrize("block", BAD_BLOCKS, ids=repr)
def test_a_block_size_that_is_no_positive_integer_is_refused_everywhere(block):
    q, k = make_inputs(1, 2, 1, 9, 9)
    if block is None.__class__:
        block = 1.0  # a float, even a whole one: one rule for integers (settings.check_argument)
    for call in _entries(q, k, block):
        with pytest.raises(EntropyLensError, match=r"^block_[qk] must be (a whole number|at least 1)") as err:
            call()
        assert "\n" not in str(err.value) and "pass block_" in str(err.value)


def test_integer_block_sizes_of_any_integer_type_run_and_agree():
    q, k = make_inputs(1, 2, 1, 9, 9)
    want = attention_stats(q, k, softmax_scale=0.3, stats=ALL, backend="torch_chunked")
    for backend in KERNELS:
        for block in (1, 3, np.int64(4), torch.tensor(5).item()):
            got = attention_stats(
                q, k, softmax_scale=0.3, stats=ALL, backend=backend, block_q=block, block_k=block
            )
            for name, values in want.items():
                torch.testing.assert_close(got[name], values, rtol=1e-5, atol=1e-5)


def _huge(D=16, scale=1e19):
    """q and k whose scores λ·q·k (λ = 0.3) leave float32's range: the issue's inputs."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(1, 2, 10, D, generator=g) * scale, torch.randn(1, 2, 10, D, generator=g) * scale


@pytest.mark.parametrize("backend", KERNELS)
def test_scores_beyond_float32_are_refused_never_read_as_finite_numbers(backend):
    q, k = _huge()
    want = attention_received(q, k, softmax_scale=0.3, backend="reference")["received"]
    assert torch.allclose(want.sum(-1), torch.full((1, 2), 10.0))  # float64: each row gives one unit
    stats = "entropy,max_prob,recent_mass"
    for call in (
        lambda: attention_received(q, k, softmax_scale=0.3, backend=backend),
        lambda: attention_stats(q, k, softmax_scale=0.3, stats=stats, backend=backend),
        lambda: attention_entropy(q, k, softmax_scale=0.3, backend=backend),
    ):
        with pytest.raises(ValueError, match=r"beyond float32's range .* backend='reference'") as err:
            call()
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("backend", KERNELS)
def test_large_scores_within_float32_are_still_computed(backend):
    """The refusal is a bound on the inputs, far above any model's scores: λ·q·k up to ~1e4 runs."""
    q, k = _huge(scale=20.0)
    got = attention_received(q, k, softmax_scale=0.3, backend=backend)["received"]
    want = attention_received(q, k, softmax_scale=0.3, backend="reference")["received"]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("T,S", [(0, 5), (5, 0), (0, 0)])
@pytest.mark.parametrize("sinks", [False, True])
def test_no_rows_or_no_keys_give_the_same_empty_answer_on_every_backend(T, S, sinks):
    q, k = make_inputs(1, 2, 1, T, S)
    kw = {"softmax_scale": 0.3, "sinks": make_sinks(2) if sinks else None}
    rows = {b: attention_stats(q, k, stats=ALL, backend=b, **kw) for b in CPU}
    keys = {b: attention_received(q, k, stats=tuple(KEY_STATISTICS), backend=b, **kw) for b in CPU}
    for got in (rows, keys):
        for backend, values in got.items():
            for name, want in got["reference"].items():
                assert torch.equal(values[name], want), (backend, name)
    assert rows["reference"]["entropy"].shape == (1, 2, T) and keys["reference"]["received"].shape == (
        1,
        2,
        S,
    )


def _column_inputs():
    q, k = make_inputs(2, 2, 2, 6, 6)
    scale, mods = validate_scale(q, k, 0.3), ScoreMods.build(q, k)
    return q, k, scale, mods, row_log_sum_exp("torch_chunked", q, k, scale, mods)


@pytest.mark.parametrize("backend", ["reference", *KERNELS])
@pytest.mark.parametrize(
    "rows",
    [torch.ones(2, 5, dtype=torch.bool), torch.ones(2, 6), torch.ones(3, 6, dtype=torch.bool), [True] * 6],
    ids=["short", "float", "batch", "list"],
)
def test_received_from_lse_refuses_rows_of_the_wrong_shape_or_type_in_one_line(backend, rows):
    q, k, scale, mods, lse = _column_inputs()
    with pytest.raises(ValueError, match=r"^rows must be a? ?\(B\|1, T\)") as err:
        received_from_lse(q, k, lse, scale, mods, rows=rows, backend=backend)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad", [float("nan"), float("-inf")])
def test_a_nan_lse_is_refused_alike_on_every_kernel(bad):
    """main: native read a NaN lse as a row that gives nothing (finite sums), torch_chunked gave NaN."""
    q, k, scale, mods, lse = _column_inputs()
    lse[0, 1, 3] = bad
    for backend in KERNELS:
        with pytest.raises(
            ValueError, match=r"lse holds 1 NaN or −inf value\(s\) \(first at batch 0, head 1, row 3\)"
        ):
            received_from_lse(q, k, lse, scale, mods, backend=backend)
    lse[0, 1, 3] = float("inf")  # +inf: a row that counts for nothing, as before
    for backend in KERNELS:
        got = received_from_lse(q, k, lse, scale, mods, backend=backend)["received"]
        assert torch.isfinite(got).all()


@pytest.mark.parametrize("T,S", [(12, 12), (5, 12), (15, 12)], ids=["square", "T<S", "T>S"])
def test_the_real_rows_after_each_key_count_a_padded_sequence_as_alone(T, S):
    """kvpress's ObservedAttentionPress divisor (issue 65, item 1), checked here without kvpress: for each
    key, the real query rows at or after its position, counted by hand from the padding."""
    from entropy_lens.kernels.received import real_rows_after

    keep = torch.ones(3, S, dtype=torch.bool)
    keep[1, 8:] = False  # right padding: this sequence is 8 tokens long
    keep[2, :4] = False  # left padding
    got = real_rows_after(keep.view(3, 1, 1, S), T, S)
    for b in range(3):
        for j in range(S):
            rows = [i for i in range(T) if 0 <= i + S - T and i + S - T >= j and keep[b, i + S - T]]
            assert got[b, j] == len(rows), (b, j)
    assert torch.equal(real_rows_after(None, S, S), torch.arange(S, 0, -1).float().view(1, S))  # S − j
    if T == S:  # the right-padded sequence of 8 divides as alone: 8 − j
        assert torch.equal(got[1, :8], torch.arange(8, 0, -1).float())
