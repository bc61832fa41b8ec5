"""torch_chunked vs the float64 reference, plus properties every entropy must satisfy."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import (
    attention_entropy,
    attention_with_entropy_torch,
    backend_for,
    entropy_reference,
    entropy_torch_chunked,
    merge_states,
    resolve_backend,
    shard_state,
    sink_state,
)
from entropy_lens.kernels.masks import decompose


def make_inputs(B, Hq, Hkv, T, S, D=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, Hq, T, D, generator=g) * 1.5).to(dtype)
    k = (torch.randn(B, Hkv, S, D, generator=g) * 1.5).to(dtype)
    return q, k


def mask_kinds(B, Hq, T, S, seed=1):
    g = torch.Generator().manual_seed(seed)
    pad = torch.ones(B, S, dtype=torch.bool)
    pad[0, : S // 3] = False  # left padding on the first sequence
    return {
        "none": None,
        "key_padding": pad,
        "4d_per_head": torch.rand(B, Hq, T, S, generator=g) > 0.4,
    }


@pytest.mark.parametrize("B", [1, 2])
@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("T,S", [(33, 33), (19, 45), (64, 64)], ids=["square", "T<S", "T=2blocks"])
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"])
@pytest.mark.parametrize("causal", [True, False])
def test_chunked_matches_reference_fp32(B, Hq, Hkv, T, S, mask_kind, causal):
    q, k = make_inputs(B, Hq, Hkv, T, S)
    scale = torch.linspace(0.1, 0.6, Hq)  # per-head scales
    mask = mask_kinds(B, Hq, T, S)[mask_kind]
    ref = attention_entropy(q, k, softmax_scale=scale, causal=causal, mask=mask, backend="reference")
    for bq, bk in [(32, 32), (7, 5)]:  # T not a multiple of the block; several key blocks per row
        got = attention_entropy(
            q,
            k,
            softmax_scale=scale,
            causal=causal,
            mask=mask,
            backend="torch_chunked",
            block_q=bq,
            block_k=bk,
        )
        assert got.dtype == torch.float32 and got.shape == (B, Hq, T)
        assert (got - ref).abs().max().item() <= 1e-5
        # the fused CPU path: the same entropy, and the output of the float64 softmax
        v = make_inputs(B, Hkv, Hkv, S, S, seed=2)[1]
        out, h, _ = attention_with_entropy_torch(q, k, v, scale, causal, mask, block_q=bq, block_k=bk)
        assert (h - ref).abs().max().item() <= 1e-5
        want = output_reference(q, k, v, scale, causal, mask)
        assert out.shape == (B, T, Hq, v.shape[-1]) and (out.double() - want).abs().max().item() <= 1e-5


def output_reference(q, k, v, scale, causal, mask):
    """softmax(λ_h q·k + mask) v in float64, (B, T, Hq, Dv); 0 for a row that sees no key."""
    G = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(G, 1) for x in (k, v))
    s = scale.double().view(1, -1, 1, 1) * (q.double() @ k.transpose(-1, -2))
    T, S = s.shape[-2:]
    keep = torch.ones(T, S, dtype=torch.bool)
    if causal:
        keep = keep.tril(S - T)
    if mask is not None:
        keep = keep & (mask[:, None, None, :] if mask.ndim == 2 else mask)
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)
    return (p @ v).transpose(1, 2)


def test_block_size_one_and_float_scale():
    q, k = make_inputs(2, 4, 2, 17, 23)
    ref = attention_entropy(q, k, softmax_scale=0.25, backend="reference")
    got = attention_entropy(q, k, softmax_scale=0.25, backend="torch_chunked", block_q=1, block_k=1)
    assert (got - ref).abs().max().item() <= 1e-5


def test_rows_without_keys_are_zero():
    # T > S with bottom-right alignment: the first T - S queries see no key at all.
    q, k = make_inputs(1, 2, 1, 12, 5)
    got = attention_entropy(q, k, softmax_scale=0.3, block_q=4, block_k=2)
    assert torch.equal(got[..., :7], torch.zeros(1, 2, 7))
    assert torch.equal(got[..., 7], torch.zeros(1, 2))  # row 7 sees exactly one key
    assert (got[..., 8:] > 0).all()
    assert torch.allclose(got, attention_entropy(q, k, softmax_scale=0.3, backend="reference"), atol=1e-5)
    # a fully padded sequence
    mask = torch.zeros(1, 5, dtype=torch.bool)
    got = attention_entropy(q[..., -5:, :], k, softmax_scale=0.3, mask=mask)
    assert torch.equal(got, torch.zeros(1, 2, 5))


def plain_pytorch_entropy(q, k, scale, T, S):
    """What an eager HF model does in a low-precision dtype: scores in that dtype, softmax in
    fp32 cast back, entropy from those probabilities (the paper's own computation)."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    vis = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.special.entr(p).sum(-1).float()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_twice_plain_pytorch(dtype):
    q, k = make_inputs(2, 4, 4, 96, 96, D=32, dtype=dtype)
    scale = 32**-0.5
    ref = attention_entropy(q, k, softmax_scale=scale, backend="reference")  # float64 of the same inputs
    got = attention_entropy(q, k, softmax_scale=scale, backend="torch_chunked", block_q=32, block_k=16)
    plain = plain_pytorch_entropy(q, k, scale, 96, 96)
    err_plain = (plain - ref).abs().max().item()
    err_got = (got - ref).abs().max().item()
    assert err_plain > 0
    assert err_got <= 2 * err_plain


def test_no_repeated_keys_needed_and_gqa_head_mapping():
    # head h must use key head h // G: permuting key heads must permute the entropy groups.
    q, k = make_inputs(1, 4, 2, 20, 20)
    a = attention_entropy(q, k, softmax_scale=0.3)
    b = attention_entropy(q[:, [2, 3, 0, 1]], k[:, [1, 0]], softmax_scale=0.3)
    assert torch.allclose(a[:, [2, 3, 0, 1]], b, atol=1e-6)


def test_contract_errors():
    q, k = make_inputs(1, 4, 3, 8, 8)
    with pytest.raises(ValueError, match="multiple"):
        attention_entropy(q, k, softmax_scale=1.0)
    q, k = make_inputs(1, 4, 2, 8, 8)
    with pytest.raises(ValueError, match="scale"):
        attention_entropy(q, k, softmax_scale=torch.ones(3))
    with pytest.raises(ValueError, match="bool"):
        attention_entropy(q, k, softmax_scale=1.0, mask=torch.ones(1, 8))
    with pytest.raises(ValueError, match="mask shape"):
        attention_entropy(q, k, softmax_scale=1.0, mask=torch.ones(1, 7, dtype=torch.bool))
    with pytest.raises(EntropyLensError, match="unknown entropy backend"):
        attention_entropy(q, k, softmax_scale=1.0, backend="cuda-magic")


def _triton(name):
    """The Triton launcher `name` (imported without a GPU: its argument binding is all that runs)."""
    pytest.importorskip("triton")
    from entropy_lens.kernels import triton_entropy

    return getattr(triton_entropy, name)


# every kernel entry point, called with valid arguments plus the keywords given
ENTRY_POINTS = {
    **{
        f"attention_entropy-{backend}": lambda q, k, backend=backend, **kw: attention_entropy(
            q, k, softmax_scale=0.3, backend=backend, **kw
        )
        for backend in ("auto", "reference", "torch_chunked", "triton")
    },
    "backend_for": lambda q, k, **kw: backend_for("auto", q, k, **kw),
    "entropy_reference": lambda q, k, **kw: entropy_reference(q, k, torch.full((4,), 0.3), **kw),
    "entropy_torch_chunked": lambda q, k, **kw: entropy_torch_chunked(q, k, torch.full((4,), 0.3), **kw),
    "attention_with_entropy_torch": lambda q, k, **kw: attention_with_entropy_torch(q, k, k, 0.3, **kw),
    "entropy_triton": lambda q, k, **kw: _triton("entropy_triton")(q, k, torch.full((4,), 0.3), **kw),
    "attention_with_entropy_triton": lambda q, k, **kw: _triton("attention_with_entropy_triton")(
        q, k, k, torch.full((4,), 0.3), **kw
    ),
    "shard_state": lambda q, k, **kw: shard_state(q, k, 0.3, key_offset=0, total_keys=6, **kw),
    "merge_states": lambda q, k, **kw: merge_states(
        shard_state(q, k, 0.3, key_offset=0, total_keys=6), sink_state(torch.zeros(4), 1, 6), **kw
    ),
    "sink_state": lambda q, k, **kw: sink_state(torch.zeros(4), 1, 6, **kw),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_refuses_an_unknown_keyword_on_every_backend(entry):
    """A misspelt keyword (`sofcap=` for `softcap=`) raises, naming it, instead of being dropped: a
    dropped softcap gives a plausible, wrong entropy."""
    q, k = make_inputs(1, 4, 2, 6, 6)
    with pytest.raises(TypeError, match="sofcap"):
        ENTRY_POINTS[entry](q, k, sofcap=30.0)
    if not entry.endswith("triton"):  # the same call without the typo runs (the triton ones need CUDA)
        ENTRY_POINTS[entry](q, k)


def test_backend_env_override(monkeypatch):
    assert resolve_backend("auto", "cpu") == "torch_chunked"
    monkeypatch.setenv("ENTROPY_LENS_BACKEND", "reference")
    assert resolve_backend("auto", "cpu") == "reference"
    assert resolve_backend("torch_chunked", "cpu") == "torch_chunked"  # explicit beats the environment


def test_backend_for_names_what_attention_entropy_runs_on_cpu(monkeypatch):
    """Without triton in play every mask runs where `backend` says (the triton cases: triton_interp_cases.py)."""
    monkeypatch.delenv("ENTROPY_LENS_BACKEND", raising=False)
    q, k = make_inputs(2, 4, 2, 9, 9)
    for mask in mask_kinds(2, 4, 9, 9).values():
        assert backend_for("auto", q, k, mask=mask) == "torch_chunked"
        assert backend_for("reference", q, k, mask=mask, window=3) == "reference"
    with pytest.raises(ValueError, match="mask shape"):
        backend_for("torch_chunked", q, k, mask=torch.ones(2, 8, dtype=torch.bool))


# ---- properties -------------------------------------------------------------------------------

shapes = st.tuples(
    st.integers(1, 2),  # B
    st.sampled_from([(2, 2), (4, 2), (3, 1)]),  # Hq, Hkv
    st.integers(1, 24),  # T
    st.integers(0, 8),  # extra keys: S = T + extra
    st.integers(1, 9),  # block size
    st.integers(0, 2**16),  # seed
)


@settings(max_examples=40, deadline=None)
@given(shapes, st.floats(0.01, 3.0))
def test_entropy_bounds(shape, scale):
    B, (Hq, Hkv), T, extra, blk, seed = shape
    S = T + extra
    q, k = make_inputs(B, Hq, Hkv, T, S, D=8, seed=seed)
    h = attention_entropy(q, k, softmax_scale=scale, block_q=blk, block_k=blk)
    n_keys = torch.arange(T, dtype=torch.float64) + extra + 1  # attendable keys of row i
    assert (h >= 0).all()
    assert (h.double() <= torch.log(n_keys) + 1e-5).all()


@settings(max_examples=30, deadline=None)
@given(shapes, st.floats(-50.0, 50.0))
def test_row_constant_leaves_entropy_unchanged(shape, c):
    # scores + c_i for every key of row i: append a dimension with q = c_i/λ, k = 1.
    B, (Hq, Hkv), T, extra, blk, seed = shape
    S = T + extra
    q, k = make_inputs(B, Hq, Hkv, T, S, D=8, seed=seed)
    lam = 0.4
    rowc = torch.linspace(-1, 1, T).mul(c).view(1, 1, T, 1).expand(B, Hq, T, 1)
    q2 = torch.cat([q, rowc / lam], -1)
    k2 = torch.cat([k, torch.ones(B, Hkv, S, 1)], -1)
    a = attention_entropy(q, k, softmax_scale=lam, block_q=blk, block_k=blk)
    b = attention_entropy(q2, k2, softmax_scale=lam, block_q=blk, block_k=blk)
    assert torch.allclose(a, b, atol=2e-4)


@settings(max_examples=20, deadline=None)
@given(shapes)
def test_huge_scale_gives_zero_entropy_without_nan(shape):
    B, (Hq, Hkv), T, extra, blk, seed = shape
    q, k = make_inputs(B, Hq, Hkv, T, T + extra, D=8, seed=seed)
    h = attention_entropy(q, k, softmax_scale=1e6, block_q=blk, block_k=blk)
    assert torch.isfinite(h).all()
    assert h.max().item() < 1e-3


def test_uniform_attention_reaches_the_bound():
    q = torch.zeros(1, 2, 50, 8)
    k = torch.randn(1, 1, 50, 8)
    h = attention_entropy(q, k, softmax_scale=1.0, block_q=8, block_k=8)
    expected = torch.log(torch.arange(1, 51, dtype=torch.float32))
    assert torch.allclose(h[0, 0], expected, atol=1e-5)
    assert math.isclose(h[0, 1, -1].item(), math.log(50), rel_tol=1e-6)


def hf_mask(keep, T, S, window=None):
    """The (B, 1, T, S) bool mask transformers itself builds for T queries at the end of S keys:
    causal, sliding window, key padding `keep` (B, S). Built by transformers, not by the kernels'
    helpers, so the kernels' window convention is checked against the library's."""
    from transformers.masking_utils import (
        causal_mask_function,
        sdpa_mask,
        sliding_window_causal_mask_function,
    )

    shape = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    return sdpa_mask(
        keep.shape[0],
        T,
        S,
        q_offset=S - T,
        mask_function=shape,
        attention_mask=keep,
        allow_is_causal_skip=False,
    )


@pytest.mark.parametrize("window", [None, 1, 3, 5])
@pytest.mark.parametrize("T,S", [(6, 9), (9, 9), (9, 4)])
def test_causal_window_and_padding_masks_are_decomposed(window, T, S):
    keep = torch.ones(2, S, dtype=torch.bool)
    keep[1, : S // 2] = False  # left padding of the second sequence
    keep[0, -1] = False  # right padding of the first
    keep_got, window_got = decompose(hf_mask(keep, T, S, window), 2, T, S, True)
    # any decomposition that rebuilds the mask exactly is right; the window found may be the
    # mask's own or one that cuts only keys the padding hides already
    assert torch.equal(hf_mask(keep_got, T, S, window_got), hf_mask(keep, T, S, window))
    if window is not None and window < S // 2:
        assert window_got == window
    unpadded = hf_mask(torch.ones(2, S, dtype=torch.bool), T, S, window)
    window_kept = None if window is None or window >= S else window
    assert decompose(unpadded, 2, T, S, True) == (None, window_kept)  # nothing padded: no keep-mask


def test_masks_that_are_not_causal_window_and_padding_are_left_to_the_torch_path():
    T, S = 6, 9
    keep = torch.tensor([[True] * 9, [False] * 4 + [True] * 5])
    mask = hf_mask(keep, T, S, window=3)
    assert torch.equal(decompose(keep[:, None, None, :], 2, T, S, True)[0], keep)
    for row, col in [(2, 1), (4, 5), (3, 6)]:  # one score more or fewer than any decomposition has
        other = mask.clone()
        other[0, 0, row, col] = not other[0, 0, row, col]
        assert decompose(other, 2, T, S, True) is None
    assert decompose(mask.expand(2, 3, T, S), 2, T, S, True) is None  # per-head
    assert torch.equal(decompose(keep[:, None, None, :].expand(2, 1, T, S), 2, T, S, False)[0], keep)
    assert decompose(mask, 2, T, S, False) is None  # rows differ: no bidirectional padding form


def test_decompose_checks_long_masks_in_row_blocks(monkeypatch):
    from entropy_lens.kernels import masks

    monkeypatch.setattr(masks, "ROWS_PER_CHECK", 4)
    keep = torch.ones(1, 30, dtype=torch.bool)
    keep[0, :7] = False
    mask = hf_mask(keep, 25, 30, window=6)
    assert decompose(mask, 1, 25, 30, True)[1] == 6
    mask[0, 0, 24, 27] = False  # a score in the last row block (key 27 is kept for rows 22, 23)
    assert decompose(mask, 1, 25, 30, True) is None


@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (6, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("T,S", [(40, 40), (17, 50), (50, 20)], ids=["square", "T<S", "T>S"])
@pytest.mark.parametrize("window", [1, 4, 11, 64])
@pytest.mark.parametrize("padded", [False, True])
def test_sliding_window_equals_its_mask(Hq, Hkv, T, S, window, padded):
    """`window=W` attends where transformers' own sliding-window mask (with padding) attends."""
    q, k = make_inputs(2, Hq, Hkv, T, S)
    keep = torch.ones(2, S, dtype=torch.bool)
    if padded:
        keep[1, : S // 3] = False
    scale = torch.linspace(0.2, 0.6, Hq)
    as_mask = attention_entropy(
        q, k, softmax_scale=scale, mask=hf_mask(keep, T, S, window), backend="reference"
    )
    direct = attention_entropy(
        q, k, softmax_scale=scale, mask=keep if padded else None, window=window, backend="reference"
    )
    assert torch.equal(direct, as_mask)
    for block_q, block_k in [(64, 1024), (7, 5), (16, 3)]:
        got = attention_entropy(
            q,
            k,
            softmax_scale=scale,
            mask=keep if padded else None,
            window=window,
            backend="torch_chunked",
            block_q=block_q,
            block_k=block_k,
        )
        assert (got - as_mask).abs().max().item() <= 1e-5


def test_window_is_validated():
    q, k = make_inputs(1, 2, 2, 5, 5)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="window must be"):
            attention_entropy(q, k, softmax_scale=0.3, window=bad)
    with pytest.raises(ValueError, match="causal=True"):
        attention_entropy(q, k, softmax_scale=0.3, causal=False, window=4)
