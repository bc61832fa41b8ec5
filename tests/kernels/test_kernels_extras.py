"""Softcap (Gemma2) and attention sinks (gpt-oss) in every kernel that can run here (kernel_cases.RUNNABLE):
the entropy pass and the one pass against the float64 reference on the shared grid, the reference and the
output against transformers' own eager attention functions, low precision within twice plain PyTorch,
shard merging, the contract's errors. The Triton kernel's launcher cases live in triton_interp_cases.py."""

import functools
import itertools
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import (
    EXTRAS,
    RUNNABLE,
    TILES,
    cpu_tiles,
    entropy_pass,
    hf_mask,
    make_inputs,
    make_sinks,
    make_values,
    mask_kinds,
    one_pass,
    plain_pytorch_extras,
    reference_output,
    value_dim,
)
from kernel_grid import cover

from entropy_lens.kernels import (
    attention_entropy,
    attention_with_entropy,
    entropy_from_state,
    merge_states,
    shard_state,
    sink_mass_from_state,
    sink_state,
)

WINDOWS = {"causal": (True, None), "full": (False, None), "win": (True, 4), "win5": (True, 5)}
# (extras, (Hq, Hkv), (T, S), mask kind, causal/window): the grid, and the Triton kernel's own grid
# before the cases were shared (GQA 4/2, no per-head mask, a window of 5), so none of its cases is lost;
# each an all-pairs cover, the full product under make test-full (tests/kernel_grid.py)
CASES = [
    *cover(
        EXTRAS,
        [(4, 4), (6, 2)],
        [(33, 33), (19, 45), (12, 5)],
        ["none", "key_padding", "4d_per_head"],
        ["causal", "full", "win"],
    ),
    *cover(
        EXTRAS, [(4, 2)], [(33, 33), (19, 45), (12, 5)], ["none", "key_padding"], ["causal", "full", "win5"]
    ),
]
TS_IDS = {(33, 33): "square", (19, 45): "T<S", (12, 5): "T>S"}


def case_id(case) -> str:
    extras, (Hq, Hkv), ts, mask_kind, windows = case
    return f"{extras}-{Hq}/{Hkv}-{TS_IDS[ts]}-{mask_kind}-{windows}"


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_softcap_and_sinks_match_reference(backend, case):
    extras, (Hq, Hkv), (T, S), mask_kind, windows = case
    softcap, with_sinks = EXTRAS[extras]
    causal, window = WINDOWS[windows]
    q, k = make_inputs(2, Hq, Hkv, T, S)
    v = make_values(2, Hkv, S, Dv=value_dim(backend))
    kw = {
        "softmax_scale": torch.linspace(0.1, 0.6, Hq),  # per-head scales
        "causal": causal,
        "mask": mask_kinds(2, Hq, T, S)[mask_kind],
        "window": window,
        "softcap": softcap,
        "sinks": make_sinks(Hq) if with_sinks else None,
    }
    ref_h, ref_p = attention_entropy(q, k, backend="reference", return_sink_mass=True, **kw)
    assert (ref_p > 0).any() == with_sinks
    ref_out = reference_output(q, k, v, **kw)
    for tile in TILES[backend]:
        h, p = entropy_pass(backend, q, k, tile, **kw)
        assert h.dtype == p.dtype == torch.float32 and h.shape == p.shape == (2, Hq, T)
        assert (h - ref_h).abs().max().item() <= 1e-5 and (p - ref_p).abs().max().item() <= 1e-6
        out, h1, p1 = one_pass(backend, q, k, v, tile, **kw)
        assert out.shape == (2, T, Hq, v.shape[-1]) and out.dtype == torch.float32
        assert (out.double() - ref_out).abs().max().item() <= 1e-5
        assert (h1 - ref_h).abs().max().item() <= 1e-5 and (p1 - ref_p).abs().max().item() <= 1e-6
        if backend == "native":  # the entropy-only loop: the same numbers without the value GEMM
            assert torch.equal(h, h1) and torch.equal(p, p1)


def test_entropy_only_default_return_and_zero_sink_mass_without_sinks():
    q, k = make_inputs(1, 2, 1, 9, 9)
    h = attention_entropy(q, k, softmax_scale=0.3, softcap=3.0)
    assert isinstance(h, torch.Tensor) and h.shape == (1, 2, 9)
    for backend in ("reference", "torch_chunked"):
        h2, p = attention_entropy(
            q, k, softmax_scale=0.3, softcap=3.0, return_sink_mass=True, backend=backend
        )
        assert torch.equal(p, torch.zeros(1, 2, 9)) and (h2 - h).abs().max() <= 1e-5


def test_rows_without_keys_put_all_mass_on_the_sink():
    """T > S bottom-right and a fully padded sequence: p_sink = 1, H = 0, output 0 (gpt-oss's eager
    does the same); without sinks the output is 0 as sdpa's."""
    q, k = make_inputs(2, 2, 1, 12, 5)
    v = make_values(2, 1, 5)
    keep = torch.ones(2, 5, dtype=torch.bool)
    keep[1] = False
    sinks = make_sinks(2)
    for backend in ("reference", "torch_chunked"):
        h, p = attention_entropy(
            q, k, softmax_scale=0.3, mask=keep, sinks=sinks, return_sink_mass=True, backend=backend
        )
        assert torch.equal(h[0, :, :7], torch.zeros(2, 7)) and torch.equal(p[0, :, :7], torch.ones(2, 7))
        assert torch.equal(h[1], torch.zeros(2, 12)) and torch.equal(p[1], torch.ones(2, 12))
        assert (h[0, :, 7:] > 0).all() and (p[0, :, 7:] < 1).all()
    for s in (sinks, None):
        out, h, _ = one_pass("torch_chunked", q, k, v, (4, 2), softmax_scale=0.3, mask=keep, sinks=s)
        assert torch.equal(out[0, :7], torch.zeros(7, 2, 12)) and torch.equal(out[1], torch.zeros(12, 2, 12))
        assert torch.isfinite(out).all() and torch.isfinite(h).all()


# ---- against transformers' own eager attention ---------------------------------------------------


def _additive(mask4):
    """transformers' eager form of a bool mask: 0 where attended, the dtype's minimum elsewhere."""
    return torch.zeros(mask4.shape, dtype=torch.float64).masked_fill(~mask4, torch.finfo(torch.float64).min)


def _stub(G, **attrs):
    return SimpleNamespace(num_key_value_groups=G, training=False, **attrs)


@pytest.mark.parametrize("T,S,window", [(24, 24, None), (10, 30, None), (24, 24, 6)])
def test_sink_entropy_from_gpt_oss_eager_probabilities(T, S, window):
    """H of gpt-oss's own probabilities (keys, plus the sink as 1 − Σ p) in float64, left padding."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    Hq, Hkv = 6, 2
    q, k = make_inputs(2, Hq, Hkv, T, S, seed=7)
    v = make_values(2, Hkv, S, Dv=16)
    keep = torch.ones(2, S, dtype=torch.bool)
    keep[1, : S // 3] = False
    mask4 = hf_mask(keep, T, S, window)
    sinks = make_sinks(Hq)
    module = _stub(Hq // Hkv, sinks=sinks.double())
    out_hf, p = eager_attention_forward(
        module, q.double(), k.double(), v.double(), _additive(mask4), scaling=0.35, dropout=0.0
    )
    p_sink = 1 - p.sum(-1)
    h_hf = -torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(p_sink, p_sink)
    kw = {"softmax_scale": 0.35, "mask": mask4, "sinks": sinks, "return_sink_mass": True}
    for backend, blocks in [("reference", {}), ("torch_chunked", {"block_q": 5, "block_k": 7})]:
        h, ps = attention_entropy(q, k, backend=backend, **kw, **blocks)
        assert (h.double() - h_hf).abs().max().item() <= 1e-5
        assert (ps.double() - p_sink).abs().max().item() <= 1e-6
    out, h, ps = one_pass("torch_chunked", q, k, v, (5, 7), softmax_scale=0.35, mask=mask4, sinks=sinks)
    assert (out.double() - out_hf).abs().max().item() <= 1e-5
    assert (h.double() - h_hf).abs().max().item() <= 1e-5


@pytest.mark.parametrize("T,S,window", [(24, 24, None), (10, 30, None), (24, 24, 6)])
def test_softcap_output_and_entropy_against_gemma2_eager(T, S, window):
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    Hq, Hkv, softcap = 4, 2, 3.0
    q, k = make_inputs(2, Hq, Hkv, T, S, seed=8)
    v = make_values(2, Hkv, S, Dv=16)
    keep = torch.ones(2, S, dtype=torch.bool)
    keep[0, : S // 4] = False
    mask4 = hf_mask(keep, T, S, window)
    out_hf, p = eager_attention_forward(
        _stub(Hq // Hkv, head_dim=16),
        q.double(),
        k.double(),
        v.double(),
        _additive(mask4),
        dropout=0.0,
        scaling=0.4,
        softcap=softcap,
    )
    h_hf = -torch.special.xlogy(p, p).sum(-1)
    seen = mask4.any(-1).expand(2, Hq, T)  # eager spreads a row with no key over all keys; we give it 0
    out, h, ps = one_pass("torch_chunked", q, k, v, (5, 7), softmax_scale=0.4, mask=mask4, softcap=softcap)
    assert (out.double() - out_hf).transpose(1, 2)[seen].abs().max().item() <= 1e-5
    assert (h.double() - h_hf)[seen].abs().max().item() <= 1e-5 and torch.equal(ps, torch.zeros_like(ps))
    ref = attention_entropy(q, k, softmax_scale=0.4, mask=mask4, softcap=softcap, backend="reference")
    assert (ref.double() - h_hf)[seen].abs().max().item() <= 1e-6


# ---- low precision: at most twice plain PyTorch's error ---------------------------------------------


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("extras", list(EXTRAS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_twice_plain_pytorch(backend, extras, dtype):
    softcap, with_sinks = EXTRAS[extras]
    q, k = make_inputs(2, 4, 2, 96, 96, D=32, dtype=dtype)
    v = make_values(2, 2, 96, Dv=32, dtype=dtype)
    sinks = make_sinks(4).to(dtype) if with_sinks else None  # a model's sinks are in its dtype
    scale = 32**-0.5 * 3  # scores of a few units, so the cap bites
    kw = {"softmax_scale": scale, "softcap": softcap, "sinks": sinks}
    (tile,) = cpu_tiles([(32, 16)])[backend]
    ref = attention_entropy(q, k, backend="reference", **kw)
    ref_out = reference_output(q, k, v, **kw)
    plain_h, plain_out = plain_pytorch_extras(q, k, v, scale, softcap, sinks)
    got, _ = entropy_pass(backend, q, k, tile, **kw)
    out, h, _ = one_pass(backend, q, k, v, tile, **kw)
    err_plain = (plain_h - ref).abs().max().item()
    assert 0 < err_plain and (got - ref).abs().max().item() <= 2 * err_plain
    assert (h - ref).abs().max().item() <= 2 * err_plain
    err_plain_out = (plain_out.double() - ref_out).abs().max().item()
    assert out.dtype == dtype and (out.double() - ref_out).abs().max().item() <= 2 * err_plain_out


# ---- shards: softcap per shard, the sink merged once ----------------------------------------------


@pytest.mark.parametrize("cuts", [[20], [0, 7, 30, 30]])
@pytest.mark.parametrize("window", [None, 9])
def test_shards_with_softcap_and_one_sink_state_merge_to_the_reference(cuts, window):
    q, k = make_inputs(2, 6, 2, 37, 53, D=8)
    scale, sinks = torch.linspace(0.3, 1.5, 6), make_sinks(6)
    S = k.shape[2]
    states = [
        shard_state(
            q,
            k[:, :, a:b],
            scale,
            key_offset=a,
            total_keys=S,
            window=window,
            softcap=2.0,
            block_q=8,
            block_k=5,
        )
        for a, b in itertools.pairwise([0, *cuts, S])
    ]
    states.insert(len(states) // 2, sink_state(sinks, 2, 37))  # anywhere in the fold, exactly once
    state = functools.reduce(merge_states, states)
    ref_h, ref_p = attention_entropy(
        q,
        k,
        softmax_scale=scale,
        window=window,
        softcap=2.0,
        sinks=sinks,
        return_sink_mass=True,
        backend="reference",
    )
    torch.testing.assert_close(entropy_from_state(state), ref_h, atol=2e-5, rtol=0)
    torch.testing.assert_close(sink_mass_from_state(state, sinks), ref_p, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"\(Hq,\)"):
        sink_state(sinks.view(2, 3), 2, 37)


# ---- properties ------------------------------------------------------------------------------------

shapes = st.tuples(
    st.integers(1, 2),  # B
    st.sampled_from([(2, 2), (4, 2), (3, 1)]),  # Hq, Hkv
    st.integers(1, 20),  # T
    st.integers(0, 8),  # extra keys: S = T + extra
    st.integers(1, 9),  # block size
    st.integers(0, 2**16),  # seed
)


@settings(max_examples=30, deadline=None)
@given(shapes, st.floats(0.05, 3.0), st.floats(0.5, 30.0), st.floats(-8.0, 8.0))
def test_bounds_with_a_sink(shape, scale, softcap, sink):
    """0 <= H <= ln(keys + 1) (the sink is one outcome more), 0 < p_sink <= 1."""
    B, (Hq, Hkv), T, extra, blk, seed = shape
    q, k = make_inputs(B, Hq, Hkv, T, T + extra, D=8, seed=seed)
    sinks = torch.full((Hq,), sink)
    h, p = attention_entropy(
        q,
        k,
        softmax_scale=scale,
        softcap=softcap,
        sinks=sinks,
        return_sink_mass=True,
        block_q=blk,
        block_k=blk,
    )
    n_keys = torch.arange(T, dtype=torch.float64) + extra + 1
    assert (h >= 0).all() and (h.double() <= torch.log(n_keys + 1) + 1e-5).all()
    assert (p > 0).all() and (p <= 1 + 1e-6).all()


@settings(max_examples=20, deadline=None)
@given(shapes)
def test_limits_a_huge_cap_and_a_negligible_sink_change_nothing(shape):
    B, (Hq, Hkv), T, extra, blk, seed = shape
    q, k = make_inputs(B, Hq, Hkv, T, T + extra, D=8, seed=seed)
    plain = attention_entropy(q, k, softmax_scale=0.3, block_q=blk, block_k=blk)
    capped = attention_entropy(q, k, softmax_scale=0.3, softcap=1e4, block_q=blk, block_k=blk)
    buried, p = attention_entropy(
        q,
        k,
        softmax_scale=0.3,
        sinks=torch.full((Hq,), -200.0),
        return_sink_mass=True,
        block_q=blk,
        block_k=blk,
    )
    assert torch.allclose(capped, plain, atol=1e-5) and torch.allclose(buried, plain, atol=1e-5)
    assert p.max().item() < 1e-30
    # a sink far above every score takes all the mass: H = 0, p_sink = 1
    h, p = attention_entropy(q, k, softmax_scale=0.3, sinks=torch.full((Hq,), 200.0), return_sink_mass=True)
    assert h.abs().max().item() < 1e-6 and torch.allclose(p, torch.ones_like(p))


def test_softcap_bounds_every_score():
    """With cap c every score lies in (−c, c), so p_max/p_min < e^(2c) and H = ln n − KL(p‖uniform)
    >= ln n − 2c; a tiny cap gives uniform rows."""
    q, k = make_inputs(1, 2, 1, 30, 30)
    h = attention_entropy(q, k, softmax_scale=50.0, softcap=1e-4)  # huge scores, capped to ~0: uniform
    expected = torch.log(torch.arange(1, 31, dtype=torch.float32))
    assert torch.allclose(h[0, 0], expected, atol=1e-4)
    n = torch.arange(1, 31, dtype=torch.float64)
    h = attention_entropy(q, k, softmax_scale=50.0, softcap=0.5).double()
    assert (h >= torch.log(n) - 1.0 - 1e-5).all()


# ---- the contract --------------------------------------------------------------------------------


def test_contract_errors_for_softcap_and_sinks():
    q, k = make_inputs(1, 4, 2, 8, 8)
    v = make_values(1, 2, 8)
    for bad in (0, -1.0, math.inf, math.nan, "50", True):
        with pytest.raises(ValueError, match="softcap"):
            attention_entropy(q, k, softmax_scale=0.3, softcap=bad)
    for bad, match in [
        (torch.ones(3), r"\(4,\)"),
        (torch.ones(1, 4), r"\(4,\)"),
        (torch.ones(4, dtype=torch.long), "float tensor"),
        ([0.0] * 4, "float tensor"),
        (torch.tensor([0.0, 1.0, float("-inf"), 0.0]), "finite"),
    ]:
        with pytest.raises(ValueError, match=match):
            attention_entropy(q, k, softmax_scale=0.3, sinks=bad)
    with pytest.raises(ValueError, match="v must be"):
        attention_with_entropy(q, k, v[:, :, :7], softmax_scale=0.3, backend="torch_chunked")
    with pytest.raises(ValueError, match="softcap"):
        shard_state(q, k, 0.3, key_offset=0, total_keys=8, softcap=-2.0)
    # any float dtype and device-free: bf16 sinks are taken as they are (exactly, in fp32)
    h = attention_entropy(q, k, softmax_scale=0.3, sinks=torch.zeros(4, dtype=torch.bfloat16))
    assert torch.allclose(
        h, attention_entropy(q, k, softmax_scale=0.3, sinks=torch.zeros(4), backend="reference"), atol=1e-5
    )
