"""Attention received by every key (`entropy_lens.attention_received`, kernels/received.py) against the
float64 column statistics of materialised probabilities (kernels/received_reference.py), on every kernel
that runs here, for every score modifier: causal (bottom-right, T < S and T > S) or not, a sliding
window, key padding (left padding: padded rows give nothing, padded keys receive exactly 0) and 4-D
masks, GQA/MQA, softcap, sinks, ALiBi, a key bias, query windows, per-head scales, float32 and bf16
inputs, odd tiles; within 1e-5 relative to max(1, |value|), the row statistics' tolerance (the grid and
tolerance test_stats.py shares: tests/kernel_grid.py). Independent checks hold the reference itself: an
eager softmax's column sums, a padded batch row against its tokens alone, a query window against the last
rows alone, and every row's probabilities summing to one. The Triton kernel's cases run under the
interpreter in a child process (`test_the_triton_kernel_under_the_interpreter`, slow)."""

import ast
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from kernel_cases import RUNNABLE, device, make_inputs, make_sinks, make_slopes, mask_kinds, on_device
from kernel_grid import assert_close_relative, grid_kwargs, on_the_grid
from tolerances import float32_rounding, sum_tolerance
from triton_interp_plugin import run_under_the_interpreter

import entropy_lens
from entropy_lens.flags import ALL, parse_stats
from entropy_lens.kernels import (
    ScoreMods,
    attention_received,
    attention_stats,
    received_from_lse,
)
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.plan import ONE_PASS_KEYS
from entropy_lens.kernels.received import counted_rows, row_log_sum_exp
from entropy_lens.statistics import (
    KEY_STATISTICS,
    MAX,
    RECEIVED,
    RECEIVED_MAX,
    RECEIVED_MEAN,
    STATISTICS,
    reduction_of,
)

KEYS = tuple(KEY_STATISTICS)
TILES = {
    "torch_chunked": [(256, 256), (7, 5)],
    "native": [(256, 128), (32, 32), (7, 5)],
    "triton": [(None, None)],
}


def received(backend, q, k, tile=(None, None), **kw):
    """`attention_received` of every key statistic on the backend's device, back on the CPU."""
    dev = device(backend)
    bq, bk = tile
    blocks = {} if bq is None else {"block_q": bq, "block_k": bk}
    got = attention_received(
        q.to(dev), k.to(dev), stats=KEYS, backend=backend, **blocks, **on_device(kw, dev)
    )
    return {name: values.cpu() for name, values in got.items()}


@on_the_grid
@pytest.mark.parametrize("backend", RUNNABLE)
def test_every_key_statistic_equals_its_definition(backend, Hq, Hkv, T, S, mask_kind, causal, case):
    B = 2
    q, k = make_inputs(B, Hq, Hkv, T, S)
    kw = grid_kwargs(case, B, Hq, T, S, mask_kind, causal)
    kw["softmax_scale"] = torch.linspace(0.2, 0.7, Hq)  # per-head scales
    for query_window in (None, 4):
        want = attention_received(q, k, stats=KEYS, query_window=query_window, backend="reference", **kw)
        assert set(want) == set(KEYS) and all(v.shape == (B, Hq, S) for v in want.values())
        for tile in TILES[backend]:
            assert_close_relative(received(backend, q, k, tile, query_window=query_window, **kw), want)
        if backend in ONE_PASS_KEYS:  # its own row pass's state above; its column pass alone here
            assert_close_relative(column_pass_alone(backend, q, k, query_window, **kw), want)


def column_pass_alone(backend, q, k, query_window, softmax_scale, **kw):
    """Every key statistic from `received_from_lse` on `backend`: its column pass over the rows' LSE of
    its row pass (two passes, where `attention_received` runs one on ONE_PASS_KEYS)."""
    mods = ScoreMods.build(q, k, **kw)
    scale = validate_scale(q, k, softmax_scale)
    lse = row_log_sum_exp(backend, q, k, scale, mods)
    rows = counted_rows(mods, q.shape[2], k.shape[2], query_window)
    return received_from_lse(q, k, lse, scale, mods, rows=rows, stats=KEYS, backend=backend)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_bf16_inputs(backend):
    """bf16 q and k: the kernels compute in fp32 from the bf16 values, the reference in float64 from the
    same values."""
    q, k = (x.to(torch.bfloat16) for x in make_inputs(2, 4, 2, 40, 40))
    kw = {"softmax_scale": 0.25, "sinks": make_sinks(4), "mask": mask_kinds(2, 4, 40, 40)["key_padding"]}
    want = attention_received(q, k, stats=KEYS, backend="reference", **kw)
    assert_close_relative(received(backend, q, k, **kw), want, tol=2e-5)


def test_the_reference_is_an_eager_softmax_column_sum():
    """The definition against the column sums of eager attention's probabilities (softmax of masked
    scores, GQA by repeated keys), written here without the package's helpers."""
    q, k = make_inputs(2, 4, 2, 12, 20)
    scale = torch.tensor([0.2, 0.3, 0.4, 0.5])
    got = attention_received(q, k, softmax_scale=scale, stats=KEYS, backend="reference")
    s = scale.double().view(1, 4, 1, 1) * q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)
    allowed = torch.ones(12, 20, dtype=torch.bool).tril(20 - 12)
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    # float64 against float64 but for the result's rounding to float32
    close = {"rtol": float32_rounding, "atol": 0.0}
    assert torch.allclose(got[RECEIVED.name].double(), p.sum(-2), **close)
    assert torch.allclose(got[RECEIVED_MAX.name].double(), p.amax(-2), **close)
    n = allowed.sum(0).double()  # keys 0..8 are seen by every row, then one row fewer per key
    assert torch.allclose(got[RECEIVED_MEAN.name].double(), p.sum(-2) / n, **close)


@pytest.mark.parametrize("backend", ["reference", *RUNNABLE])
@pytest.mark.parametrize("side", ["left", "right"])
def test_a_padded_batch_row_equals_its_tokens_alone(backend, side):
    """Left or right padding in transformers' (B, 1, T, S) mask: the padded keys receive exactly 0 and
    padded rows give nothing (right-padded rows may see real keys: they still count for nothing), so the
    real tokens' values equal those of the same tokens with no padding (ALiBi's distances use indices,
    the same either way; the sink is every row's)."""
    name = backend
    T, pad = 16, 5
    q, k = make_inputs(2, 4, 2, T, T)
    kw = {"softmax_scale": 0.4, "sinks": make_sinks(4), "alibi_slopes": make_slopes(4, 0.3)}
    keep = torch.ones(2, T, dtype=torch.bool)
    real = slice(pad, T) if side == "left" else slice(0, T - pad)
    keep[0] = False
    keep[0, real] = True
    mask = keep[:, None, None, :] & torch.ones(T, T, dtype=torch.bool).tril()
    got = received(name, q, k, mask=mask, **kw)
    alone = received(name, q[:1, :, real], k[:1, :, real], **kw)
    padded = ~keep[0]
    for stat in KEYS:
        assert torch.equal(got[stat][0][:, padded], torch.zeros(4, pad)), stat
        assert torch.allclose(got[stat][0][:, real], alone[stat][0], atol=1e-5), stat
    for query_window in (3, 20):  # the last W real rows, wherever the padding lies
        got = received(name, q, k, mask=mask, query_window=query_window, **kw)
        rows = q[:1, :, real][:, :, -query_window:]
        alone = received(name, rows, k[:1, :, real], **kw)
        assert torch.allclose(got[RECEIVED.name][0][:, real], alone[RECEIVED.name][0], atol=1e-5)


def test_a_query_window_is_the_last_rows_alone():
    """query_window=W counts the last W rows: the rows T − W.. alone against the same keys (bottom-right
    alignment puts them where they were); received_mean divides by the rows of the window only."""
    q, k = make_inputs(1, 2, 1, 24, 30)
    kw = {"softmax_scale": 0.5, "window": 9}
    # two float32 evaluations of column sums over T rows of probabilities from an S-key row pass and
    # D-term scores, in other tiles: not 1e-6 (1.9e-6 seen on a 2-core EPYC), but the bound of the sums
    tol = sum_tolerance(24 + 30 + q.shape[-1])
    for W in (1, 7, 24, 100):
        got = attention_received(q, k, stats=KEYS, query_window=W, **kw)
        alone = attention_received(q[:, :, -W:], k, stats=KEYS, **kw)
        assert_close_relative(got, alone, tol=tol)


@pytest.mark.parametrize("backend", ["reference", "torch_chunked"])
def test_every_row_gives_one_unit_to_its_keys_and_its_sink(backend):
    """Σ_j received_j + Σ_i sink_mass_i = the rows that see a key or a sink: each row's probabilities sum
    to one, the sink's share is never a key's."""
    q, k = make_inputs(2, 4, 2, 15, 11)  # T > S: 4 rows see no key; with sinks they give all to the sink
    got = attention_received(q, k, softmax_scale=0.6, backend=backend)[RECEIVED.name].sum(-1)
    assert torch.allclose(got, torch.full((2, 4), 11.0), atol=1e-4)
    kw = {"softmax_scale": 0.6, "sinks": make_sinks(4)}
    got = attention_received(q, k, backend=backend, **kw)[RECEIVED.name].sum(-1)
    sink = attention_stats(q, k, stats="sink_mass", **kw)["sink_mass"].sum(-1)
    assert torch.allclose(got + sink, torch.full((2, 4), 15.0), atol=1e-4)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_the_column_pass_takes_a_forward_lse(backend):
    """`received_from_lse` with the rows' LSE of a row pass equals `attention_received`: a capture that
    has its forward's LSE runs the column pass alone; a row whose LSE is +∞ counts for nothing."""
    dev = device(backend)
    q, k = make_inputs(2, 4, 2, 20, 20)
    kw = {"sinks": make_sinks(4), "softcap": 3.0}
    scale = validate_scale(q, k, 0.3)
    lse = row_log_sum_exp("torch_chunked", q, k, scale, ScoreMods.build(q, k, **kw))
    mods = ScoreMods.build(q.to(dev), k.to(dev), **on_device(kw, dev))

    def column_pass(lse, stats=KEYS):
        got = received_from_lse(
            q.to(dev), k.to(dev), lse.to(dev), scale.to(dev), mods, stats=stats, backend=backend
        )
        return {name: values.cpu() for name, values in got.items()}

    want = attention_received(q, k, softmax_scale=0.3, stats=KEYS, backend="reference", **kw)
    assert_close_relative(column_pass(lse), want)
    lse[:, :, :10] = torch.inf
    last = attention_received(q[:, :, 10:], k, softmax_scale=0.3, stats=KEYS, backend="reference", **kw)
    assert_close_relative(column_pass(lse), last)


def test_counted_rows():
    """Padding is a row whose own position no row may attend; a query window keeps the last W real rows."""
    keep = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    q, k = make_inputs(2, 2, 1, 6, 6)
    mods = ScoreMods.build(q, k, mask=keep)
    assert torch.equal(counted_rows(mods, 6, 6), keep)
    last2 = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 0, 0]], dtype=torch.bool)
    assert torch.equal(counted_rows(mods, 6, 6, 2), last2)
    assert counted_rows(ScoreMods.build(q, k), 6, 6) is None
    assert torch.equal(
        counted_rows(ScoreMods.build(q, k), 6, 6, 2), torch.tensor([[0, 0, 0, 0, 1, 1]]).bool()
    )


def test_the_contract_is_the_row_kernels_and_refuses_in_one_line():
    q, k = make_inputs(1, 4, 2, 8, 8)
    with pytest.raises(TypeError):
        attention_received(q, k, softmax_scale=0.3, sofcap=2.0)
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="query_window must be (a whole number|at least 1)"):
            attention_received(q, k, softmax_scale=0.3, query_window=bad)
    # one rule for integers (issue 65): a numpy integer is a window, as recent_keys takes it
    assert torch.equal(
        attention_received(q, k, softmax_scale=0.3, query_window=np.int64(3))["received"],
        attention_received(q, k, softmax_scale=0.3, query_window=3)["received"],
    )
    with pytest.raises(ValueError, match="window must be None or a positive"):
        attention_received(q, k, softmax_scale=0.3, window=0)
    with pytest.raises(ValueError, match="sinks must have shape"):
        attention_received(q, k, softmax_scale=0.3, sinks=torch.zeros(2))
    with pytest.raises(ValueError, match="a row statistic .use entropy_lens.attention_stats"):
        attention_received(q, k, softmax_scale=0.3, stats="entropy")
    with pytest.raises(ValueError, match="unknown key statistic"):
        attention_received(q, k, softmax_scale=0.3, stats="recieved")
    with pytest.raises(ValueError, match="lse must be"):
        received_from_lse(q, k, torch.zeros(1, 4), validate_scale(q, k, 0.3), ScoreMods.build(q, k))
    assert parse_stats(ALL, "keys") == KEYS and parse_stats("received_max,received", "keys") == (
        "received_max",
        "received",
    )
    assert (
        "attention_received" in entropy_lens.__all__ and entropy_lens.attention_received is attention_received
    )


def test_row_code_is_never_offered_a_key_statistic():
    """STATISTICS (and so --stats all, the kernels' reads, results, the monitor) is the row statistics;
    the key statistics are their own view of the one declaration, refused by the rows' parser in one line."""
    assert not set(KEYS) & set(STATISTICS) and set(parse_stats(ALL)) == set(STATISTICS)
    assert all(s.axis == "keys" for s in KEY_STATISTICS.values()) and all(
        s.axis == "rows" for s in STATISTICS.values()
    )
    with pytest.raises(ValueError, match="received: a key statistic .* entropy_lens.attention_received"):
        parse_stats("entropy,received")
    assert reduction_of(RECEIVED_MAX.name) is MAX and reduction_of(RECEIVED.name) is not MAX


PACKAGE = Path(entropy_lens.__file__).parent
# where a key statistic's name may be written as a string: its declaration, its read, its definition
REGISTERED = {
    "statistics/__init__.py": "Statistic",
    "kernels/received.py": "read",
    "kernels/received_reference.py": "definition",
}


def test_a_key_statistic_is_named_only_where_it_is_declared_read_or_defined():
    """The name of each key statistic, as a string in the package's code, appears only in its declaration,
    its read and its definition, once in each."""
    strays, registered = [], {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        allowed = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if func is not None and func == REGISTERED.get(rel):
                    allowed.add(id(node.args[0]))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in KEY_STATISTICS
            ):
                if id(node) in allowed:
                    registered[rel, node.value] = registered.get((rel, node.value), 0) + 1
                else:
                    strays.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not strays, "take these from entropy_lens.statistics (e.g. RECEIVED.name): " + ", ".join(strays)
    assert registered == {(rel, name): 1 for rel in REGISTERED for name in KEY_STATISTICS}


@pytest.mark.slow
def test_the_triton_kernel_under_the_interpreter():
    """This file's triton cases in a child process under TRITON_INTERPRET=1 (as test_triton_interp.py does
    for the row kernel), so the interpreter never leaks into other tests."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("already under the interpreter: this is the child process")
    run_under_the_interpreter([Path(__file__)], keyword="triton and not under_the_interpreter", timeout=1800)
