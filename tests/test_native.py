"""The native CPU kernel (kernels/native) on the torch path's float64 grids: the fp32 grid of
test_kernels (MHA/GQA/MQA, causal or not, key padding and 4-D masks, per-head scales, T < S and T > S,
odd tiles), sliding windows, softcap and sinks (test_kernels_extras), ALiBi and key bias
(test_kernels_alibi); bf16/fp16 within twice plain PyTorch; the output against sdpa; threads; the
build's status and fallback. Skipped, with the build's reason, where the extension cannot be built."""

import pytest
import torch
import torch.nn.functional as F
from test_kernels import hf_mask, make_inputs, mask_kinds, output_reference, plain_pytorch_entropy
from test_kernels_alibi import ALIBI_EXTRAS, definition, make_slopes
from test_kernels_extras import EXTRAS, make_sinks, make_values, plain_pytorch_extras, reference_output

from entropy_lens.kernels import attention_entropy
from entropy_lens.kernels.native import (
    NativeState,
    attention_with_entropy_native,
    entropy_native,
    native_available,
    native_module,
    native_status,
)

pytestmark = pytest.mark.skipif(not native_available(), reason=f"native kernel {native_status()}")
TILES = [(64, 512), (32, 32), (7, 5)]  # the default; T not a multiple; several key blocks per row


@pytest.mark.parametrize("B", [1, 2])
@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize(
    "T,S", [(33, 33), (19, 45), (64, 64), (12, 5)], ids=["square", "T<S", "T=2blocks", "T>S"]
)
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"])
@pytest.mark.parametrize("causal", [True, False])
def test_native_matches_reference_fp32(B, Hq, Hkv, T, S, mask_kind, causal):
    q, k = make_inputs(B, Hq, Hkv, T, S)
    v = make_inputs(B, Hkv, Hkv, S, S, seed=2)[1]
    scale = torch.linspace(0.1, 0.6, Hq)  # per-head scales
    mask = mask_kinds(B, Hq, T, S)[mask_kind]
    ref = attention_entropy(q, k, softmax_scale=scale, causal=causal, mask=mask, backend="reference")
    want = output_reference(q, k, v, scale, causal, mask)
    for bq, bk in TILES:
        out, h, p = attention_with_entropy_native(q, k, v, scale, causal, mask, block_q=bq, block_k=bk)
        assert h.dtype == out.dtype == torch.float32 and h.shape == (B, Hq, T)
        assert out.shape == (B, T, Hq, v.shape[-1]) and torch.equal(p, torch.zeros_like(h))
        assert (h - ref).abs().max().item() <= 1e-5
        assert (out.double() - want).abs().max().item() <= 1e-5
        # the entropy-only loop: the same numbers without the value GEMM
        assert torch.equal(entropy_native(q, k, scale, causal, mask, block_q=bq, block_k=bk), h)


@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (6, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("T,S", [(40, 40), (17, 50), (50, 20)], ids=["square", "T<S", "T>S"])
@pytest.mark.parametrize("window", [1, 4, 11, 64])
@pytest.mark.parametrize("padded", [False, True])
def test_sliding_window_equals_its_mask(Hq, Hkv, T, S, window, padded):
    q, k = make_inputs(2, Hq, Hkv, T, S)
    v = make_values(2, Hkv, S)
    keep = torch.ones(2, S, dtype=torch.bool)
    if padded:
        keep[1, : S // 3] = False
    scale = torch.linspace(0.2, 0.6, Hq)
    as_mask = hf_mask(keep, T, S, window)
    ref = attention_entropy(q, k, softmax_scale=scale, mask=as_mask, backend="reference")
    want = output_reference(q, k, v, scale, False, as_mask)
    for bq, bk in [(64, 1024), (7, 5), (16, 3)]:
        out, h, _ = attention_with_entropy_native(
            q, k, v, scale, mask=keep if padded else None, window=window, block_q=bq, block_k=bk
        )
        assert (h - ref).abs().max().item() <= 1e-5
        assert (out.double() - want).abs().max().item() <= 1e-5


@pytest.mark.parametrize("extras", list(EXTRAS))
@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (6, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("T,S", [(33, 33), (19, 45), (12, 5)], ids=["square", "T<S", "T>S"])
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"])
@pytest.mark.parametrize(
    "causal,window", [(True, None), (False, None), (True, 4)], ids=["causal", "full", "win"]
)
def test_softcap_and_sinks_match_reference(extras, Hq, Hkv, T, S, mask_kind, causal, window):
    softcap, with_sinks = EXTRAS[extras]
    q, k = make_inputs(2, Hq, Hkv, T, S)
    v = make_values(2, Hkv, S)
    kw = {
        "softmax_scale": torch.linspace(0.1, 0.6, Hq),
        "causal": causal,
        "mask": mask_kinds(2, Hq, T, S)[mask_kind],
        "window": window,
        "softcap": softcap,
        "sinks": make_sinks(Hq) if with_sinks else None,
    }
    ref_h, ref_p = attention_entropy(q, k, backend="reference", return_sink_mass=True, **kw)
    ref_out = reference_output(q, k, v, **kw)
    for bq, bk in TILES:
        out, h, p = attention_with_entropy_native(q, k, v, block_q=bq, block_k=bk, **kw)
        assert (out.double() - ref_out).abs().max().item() <= 1e-5
        assert (h - ref_h).abs().max().item() <= 1e-5 and (p - ref_p).abs().max().item() <= 1e-6
        h2, p2 = entropy_native(q, k, block_q=bq, block_k=bk, return_sink_mass=True, **kw)
        assert torch.equal(h2, h) and torch.equal(p2, p)


@pytest.mark.parametrize("cap", [0.5, 2.5, 30.0])
def test_softcap_across_the_vector_tanh_branches_and_saturation(cap):
    # scores s/c from -50 to 50 in 4001 steps: the polynomial (|s/c| <= 0.625), the exp form and
    # tanh's saturation at ±1, in the kernel's 8-lane loop and its scalar tail (4001 = 8·500 + 1)
    S = 4001
    x = torch.linspace(-50, 50, S) * cap
    k = torch.stack([x, torch.ones(S)], -1).view(1, 1, S, 2)
    q = torch.tensor([1.0, 0.0]).expand(1, 1, 5, 2) * torch.linspace(0.05, 1, 5).view(1, 1, 5, 1)
    v = make_values(1, 1, S)
    kw = {"softmax_scale": torch.ones(1), "causal": False, "softcap": cap}
    ref_h = attention_entropy(q, k, backend="reference", **kw)
    ref_out = reference_output(q, k, v, **kw)
    out, h, _ = attention_with_entropy_native(q, k, v, **kw)
    assert (h - ref_h).abs().max().item() <= 1e-5
    assert (out.double() - ref_out).abs().max().item() <= 1e-5


@pytest.mark.parametrize("extras", list(ALIBI_EXTRAS))
@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (6, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("T,S", [(33, 33), (19, 45), (12, 5)], ids=["square", "T<S", "T>S"])
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"])
@pytest.mark.parametrize(
    "causal,window", [(True, None), (False, None), (True, 4)], ids=["causal", "full", "win"]
)
@pytest.mark.parametrize("key_bias", [None, 2, 1], ids=["slopes", "bias-per-seq", "bias-shared"])
def test_alibi_and_key_bias_match_the_definition(extras, Hq, Hkv, T, S, mask_kind, causal, window, key_bias):
    softcap, with_sinks = ALIBI_EXTRAS[extras]
    q, k = make_inputs(2, Hq, Hkv, T, S)
    v = make_values(2, Hkv, S)
    kw = {
        "softmax_scale": torch.linspace(0.1, 0.6, Hq),
        "causal": causal,
        "mask": mask_kinds(2, Hq, T, S)[mask_kind],
        "window": window,
        "softcap": softcap,
        "sinks": make_sinks(Hq) if with_sinks else None,
        "alibi_slopes": make_slopes(Hq, factor=4.0),
    }
    if key_bias is not None:
        kw["key_bias"] = 3.0 * torch.randn(key_bias, Hq, S, generator=torch.Generator().manual_seed(5))
    want_h, want_p, want_out = definition(q, k, v, **kw)
    for bq, bk in TILES:
        out, h, p = attention_with_entropy_native(q, k, v, block_q=bq, block_k=bk, **kw)
        assert (out.double() - want_out).abs().max().item() <= 1e-5
        assert (h.double() - want_h).abs().max().item() <= 1e-5
        assert (p.double() - want_p).abs().max().item() <= 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_twice_plain_pytorch(dtype):
    q, k = make_inputs(2, 4, 4, 96, 96, D=32, dtype=dtype)
    v = make_values(2, 4, 96, Dv=32, dtype=dtype)
    scale = 32**-0.5
    ref = attention_entropy(q, k, softmax_scale=scale, backend="reference")
    plain = plain_pytorch_entropy(q, k, scale, 96, 96)
    out, h, _ = attention_with_entropy_native(q, k, v, scale, block_q=32, block_k=16)
    err_plain = (plain - ref).abs().max().item()
    assert 0 < err_plain and (h - ref).abs().max().item() <= 2 * err_plain
    ref_out = reference_output(q, k, v, scale)
    plain_out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).transpose(1, 2)
    err_plain_out = (plain_out.double() - ref_out).abs().max().item()
    assert out.dtype == dtype and (out.double() - ref_out).abs().max().item() <= 2 * err_plain_out


@pytest.mark.parametrize("extras", list(EXTRAS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_extras_within_twice_plain_pytorch(extras, dtype):
    softcap, with_sinks = EXTRAS[extras]
    q, k = make_inputs(2, 4, 2, 96, 96, D=32, dtype=dtype)
    v = make_values(2, 2, 96, Dv=32, dtype=dtype)
    sinks = make_sinks(4).to(dtype) if with_sinks else None
    scale = 32**-0.5 * 3
    kw = {"softmax_scale": scale, "softcap": softcap, "sinks": sinks}
    ref = attention_entropy(q, k, backend="reference", **kw)
    ref_out = reference_output(q, k, v, **kw)
    plain_h, plain_out = plain_pytorch_extras(q, k, v, scale, softcap, sinks)
    out, h, _ = attention_with_entropy_native(q, k, v, block_q=32, block_k=16, **kw)
    err_plain = (plain_h - ref).abs().max().item()
    assert 0 < err_plain and (h - ref).abs().max().item() <= 2 * err_plain
    err_plain_out = (plain_out.double() - ref_out).abs().max().item()
    assert out.dtype == dtype and (out.double() - ref_out).abs().max().item() <= 2 * err_plain_out


@pytest.mark.parametrize("Hq,Hkv", [(9, 3), (4, 1)], ids=["gqa", "mqa"])
@pytest.mark.parametrize("T,S", [(300, 300), (70, 600)], ids=["prefill", "cache"])
def test_output_equals_sdpa_up_to_rounding(Hq, Hkv, T, S):
    """At a model's head size and several tiles per row: sdpa's own fp32 output, to fp32 rounding;
    and transformers' layout, strided q (B, T, Hq, D) transposed, read without a copy."""
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, T, Hq, 64, generator=g).transpose(1, 2)  # not contiguous, as transformers passes it
    k = torch.randn(2, Hkv, S, 64, generator=g)
    v = torch.randn(2, Hkv, S, 64, generator=g)
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(T, S, dtype=torch.bool).tril(S - T), enable_gqa=True
    ).transpose(1, 2)
    out, h, _ = attention_with_entropy_native(q, k, v, 64**-0.5)
    assert (out - want).abs().max().item() <= 2e-6
    ref = attention_entropy(q, k, softmax_scale=64**-0.5, backend="reference")
    assert (h - ref).abs().max().item() <= 1e-5


def test_rows_without_keys_and_block_size_one():
    q, k = make_inputs(1, 2, 1, 12, 5)
    v = make_values(1, 1, 5)
    out, h, _ = attention_with_entropy_native(q, k, v, 0.3, block_q=4, block_k=2)
    assert torch.equal(h[..., :7], torch.zeros(1, 2, 7)) and torch.equal(out[:, :7], torch.zeros(1, 7, 2, 12))
    ref = attention_entropy(q, k, softmax_scale=0.3, backend="reference")
    for bq, bk in [(1, 1), (4, 2)]:
        assert (entropy_native(q, k, 0.3, block_q=bq, block_k=bk) - ref).abs().max().item() <= 1e-5
    keep = torch.zeros(1, 5, dtype=torch.bool)  # a fully padded sequence
    out, h, _ = attention_with_entropy_native(q[..., -5:, :], k, v, 0.3, mask=keep)
    assert torch.equal(h, torch.zeros(1, 2, 5)) and torch.equal(out, torch.zeros(1, 5, 2, 12))


def test_threads_change_nothing():
    """`--threads` sets torch's intra-op pool, which the kernel's parallel_for runs on: each block is
    one thread's, so the numbers are the same bit for bit at any thread count."""
    q, k = make_inputs(2, 6, 2, 200, 200)
    v = make_values(2, 2, 200)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = attention_with_entropy_native(q, k, v, 0.3)
        torch.set_num_threads(2)
        two = attention_with_entropy_native(q, k, v, 0.3)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_a_failing_build_is_recorded_and_never_retried():
    calls = []

    def build():
        calls.append(1)
        raise OSError("no compiler here")

    state = NativeState(build=build)
    assert native_status(state) == "not built"
    assert native_module(state) is None and native_module(state) is None
    assert native_status(state) == "unavailable (OSError: no compiler here)" and len(calls) == 1


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("ENTROPY_LENS_NATIVE", "0")
    state = NativeState(build=lambda: pytest.fail("built although disabled"))
    assert native_module(state) is None and native_status(state) == "unavailable (ENTROPY_LENS_NATIVE=0)"


def test_contract_errors():
    q, k = make_inputs(1, 4, 2, 8, 8)
    v = make_values(1, 2, 8)
    with pytest.raises(TypeError):
        attention_with_entropy_native(q, k, v, 0.3, sofcap=2.0)  # a misspelt keyword is never ignored
    with pytest.raises(ValueError, match="v must be"):
        attention_with_entropy_native(q, k, v[:, :, :7], 0.3)
    with pytest.raises(ValueError, match="window"):
        attention_with_entropy_native(q, k, v, 0.3, causal=False, window=3)
    with pytest.raises(ValueError, match="sinks"):
        attention_with_entropy_native(q, k, v, 0.3, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match="block_q"):
        attention_with_entropy_native(q, k, v, 0.3, block_q=0)
