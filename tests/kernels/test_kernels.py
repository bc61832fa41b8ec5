"""Every kernel that can run here (kernel_cases.RUNNABLE: torch_chunked, native, triton) against the float64
reference on the shared grid (MHA/GQA/MQA, T < S and T > S, key padding and 4-D masks, causal or not,
odd tiles; its all-pairs cover, the full product under make test-full: tests/kernel_grid.py), sliding windows and low precision; plus the mask decomposition, the entry points' contract
and properties every entropy must satisfy."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import (
    ENTRY_POINTS,
    RUNNABLE,
    TILES,
    TRITON_RUNS,
    cpu_tiles,
    entropy_pass,
    hf_mask,
    make_inputs,
    make_values,
    mask_kinds,
    one_pass,
    output_reference,
    plain_pytorch_entropy,
    reference_output,
    triton_skip_reason,
    value_dim,
)
from kernel_grid import over_the_cover

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import ScoreMods, attention_entropy, resolve_backend, statistics_kernel
from entropy_lens.kernels.masks import decompose

TS_GRID = [(33, 33), (19, 45), (64, 64), (12, 5)]
TS_IDS = ["square", "T<S", "T=2blocks", "T>S"]


@pytest.mark.parametrize("backend", RUNNABLE)
@over_the_cover(
    {
        "B": [1, 2],
        "Hq,Hkv": {"mha": (4, 4), "gqa": (4, 2), "mqa": (6, 1)},
        "T,S": dict(zip(TS_IDS, TS_GRID)),
        "mask_kind": ["none", "key_padding", "4d_per_head"],
        "causal": [True, False],
    }
)
def test_matches_reference_fp32(backend, B, Hq, Hkv, T, S, mask_kind, causal):
    """The entropy pass and the one pass (output beside the entropy) of each kernel, at each of its
    tiles (T not a multiple of the block; several key blocks per row), against float64."""
    q, k = make_inputs(B, Hq, Hkv, T, S)
    v = make_inputs(B, Hkv, Hkv, S, S, seed=2)[1]
    scale = torch.linspace(0.1, 0.6, Hq)  # per-head scales
    mask = mask_kinds(B, Hq, T, S)[mask_kind]
    kw = {"softmax_scale": scale, "causal": causal, "mask": mask}
    ref = attention_entropy(q, k, backend="reference", **kw)
    want = output_reference(q, k, v, scale, causal, mask)
    for tile in {**TILES, "torch_chunked": [(32, 32), (7, 5)]}[backend]:
        got, p = entropy_pass(backend, q, k, tile, **kw)
        assert got.dtype == torch.float32 and got.shape == (B, Hq, T)
        assert (got - ref).abs().max().item() <= 1e-5
        out, h, p1 = one_pass(backend, q, k, v, tile, **kw)
        assert h.dtype == torch.float32 and h.shape == (B, Hq, T)
        assert (h - ref).abs().max().item() <= 1e-5
        assert torch.equal(p, torch.zeros_like(h)) and torch.equal(p1, torch.zeros_like(h))
        assert out.shape == (B, T, Hq, v.shape[-1]) and out.dtype == torch.float32
        assert (out.double() - want).abs().max().item() <= 1e-5
        if backend == "native":  # the entropy-only loop: the same numbers without the value GEMM
            assert torch.equal(got, h)


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


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_twice_plain_pytorch(backend, dtype):
    """The entropy within twice plain PyTorch's error (its own dtype's scores and probabilities), and the
    one pass's output within twice sdpa's, both against the float64 of the same inputs."""
    q, k = make_inputs(2, 4, 4, 96, 96, D=32, dtype=dtype)
    v = make_values(2, 4, 96, Dv=32, dtype=dtype)
    scale = 32**-0.5
    (tile,) = cpu_tiles([(32, 16)])[backend]
    ref = attention_entropy(q, k, softmax_scale=scale, backend="reference")  # float64 of the same inputs
    got, _ = entropy_pass(backend, q, k, tile, softmax_scale=scale)
    plain = plain_pytorch_entropy(q, k, scale, 96, 96)
    err_plain = (plain - ref).abs().max().item()
    err_got = (got - ref).abs().max().item()
    assert err_plain > 0
    assert err_got <= 2 * err_plain
    out, h, _ = one_pass(backend, q, k, v, tile, softmax_scale=scale)
    assert (h - ref).abs().max().item() <= 2 * err_plain
    ref_out = reference_output(q, k, v, scale)
    plain_out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).transpose(1, 2)
    err_plain_out = (plain_out.double() - ref_out).abs().max().item()
    assert out.dtype == dtype and (out.double() - ref_out).abs().max().item() <= 2 * err_plain_out


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


def test_the_triton_cases_are_collected_only_where_they_run(request):
    """Where the Triton kernel cannot run (no CUDA, no interpreter) no case is collected only to be skipped
    for it: RUNNABLE leaves it out, and no item of this session carries its skip (its cases run under the
    interpreter in test_triton_interp.py's child processes)."""
    assert [p.values[0] for p in RUNNABLE] == ["torch_chunked", "native", *(["triton"] * TRITON_RUNS)]
    assert TRITON_RUNS == (triton_skip_reason() is None)
    reason = triton_skip_reason()
    marked = [
        p.id for p in RUNNABLE for m in p.marks if reason is not None and m.kwargs.get("reason") == reason
    ]
    marked += [
        item.nodeid
        for item in request.session.items
        for m in item.iter_markers("skipif")
        if reason is not None and m.kwargs.get("reason") == reason
    ]
    assert not marked, marked


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_refuses_an_unknown_keyword_on_every_backend(entry):
    """A misspelt keyword (`sofcap=` for `softcap=`) raises, naming it, instead of being dropped: a
    dropped softcap gives a plausible, wrong entropy."""
    call, cannot_run = ENTRY_POINTS[entry]
    q, k = make_inputs(1, 4, 2, 6, 6)
    with pytest.raises(TypeError, match="sofcap"):
        call(q, k, sofcap=30.0)
    if cannot_run is not None:  # the same call without the typo runs where the backend does (CUDA)
        return
    if entry == "attention_with_entropy-reference":  # the reference makes statistics, not the output
        with pytest.raises(ValueError, match="not the output"):
            call(q, k)
    else:
        call(q, k)


def test_backend_env_override(monkeypatch):
    assert resolve_backend("auto", "cpu") == "torch_chunked"
    monkeypatch.setenv("ENTROPY_LENS_BACKEND", "reference")
    assert resolve_backend("auto", "cpu") == "reference"
    assert resolve_backend("torch_chunked", "cpu") == "torch_chunked"  # explicit beats the environment


def test_statistics_kernel_names_what_attention_entropy_runs_on_cpu(monkeypatch):
    """Without triton in play every mask runs where `backend` says (the triton cases: triton_interp_cases.py)."""
    monkeypatch.delenv("ENTROPY_LENS_BACKEND", raising=False)
    q, k = make_inputs(2, 4, 2, 9, 9)
    for mask in mask_kinds(2, 4, 9, 9).values():
        mods = ScoreMods.build(q, k, mask=mask)
        assert statistics_kernel("auto", q, k, mods) == ("torch_chunked", mods)
        windowed = ScoreMods.build(q, k, mask=mask, window=3)
        assert statistics_kernel("reference", q, k, windowed) == ("reference", windowed)
    with pytest.raises(ValueError, match="mask shape"):
        ScoreMods.build(q, k, mask=torch.ones(2, 8, dtype=torch.bool))


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


@pytest.mark.parametrize("backend", RUNNABLE)
@over_the_cover(
    {
        "Hq,Hkv": {"mha": (4, 4), "gqa": (6, 2)},
        "T,S": {"square": (40, 40), "T<S": (17, 50), "T>S": (50, 20)},
        "window": [1, 4, 11, 64],
        "padded": [False, True],
    }
)
def test_sliding_window_equals_its_mask(backend, Hq, Hkv, T, S, window, padded):
    """`window=W` attends where transformers' own sliding-window mask (with padding) attends: in the
    entropy pass and the one pass, given as the window or as that mask."""
    q, k = make_inputs(2, Hq, Hkv, T, S)
    v = make_values(2, Hkv, S, Dv=value_dim(backend))
    keep = torch.ones(2, S, dtype=torch.bool)
    if padded:
        keep[1, : S // 3] = False
    scale = torch.linspace(0.2, 0.6, Hq)
    as_mask = hf_mask(keep, T, S, window)
    ref = attention_entropy(q, k, softmax_scale=scale, mask=as_mask, backend="reference")
    direct = {"softmax_scale": scale, "mask": keep if padded else None, "window": window}
    assert torch.equal(attention_entropy(q, k, backend="reference", **direct), ref)
    want = output_reference(q, k, v, scale, False, as_mask)
    for tile in cpu_tiles([(64, 1024), (7, 5), (16, 3)])[backend]:
        got, _ = entropy_pass(backend, q, k, tile, **direct)
        assert (got - ref).abs().max().item() <= 1e-5
        from_mask, _ = entropy_pass(backend, q, k, tile, softmax_scale=scale, mask=as_mask)
        assert (from_mask - ref).abs().max().item() <= 1e-5
        out, h, _ = one_pass(backend, q, k, v, tile, **direct)
        assert (h - ref).abs().max().item() <= 1e-5
        assert (out.double() - want).abs().max().item() <= 1e-5


def test_window_is_validated():
    q, k = make_inputs(1, 2, 2, 5, 5)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="window must be"):
            attention_entropy(q, k, softmax_scale=0.3, window=bad)
    with pytest.raises(ValueError, match="causal=True"):
        attention_entropy(q, k, softmax_scale=0.3, causal=False, window=4)


def test_the_extra_statistics_fold_takes_its_state_by_name():
    """torch_chunked's fold of the extra accumulators takes the tile and the state by keyword, not as
    twelve positional values (issue 49)."""
    import inspect

    from entropy_lens.kernels import torch_chunked

    params = inspect.signature(torch_chunked._update_extra).parameters.values()
    assert [p.name for p in params if p.kind is not p.KEYWORD_ONLY] == ["ext", "s"]
    assert len(params) <= 6
