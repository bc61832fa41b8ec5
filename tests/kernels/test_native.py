"""The native CPU kernel (kernels/native) beyond the shared grids (kernel_cases.RUNNABLE runs it on
test_kernels', test_kernels_extras' and test_kernels_alibi's cases): the softcap's vector tanh, the output
against sdpa at a model's head size, rows without keys and tiles of one, threads; the build's status and
fallback; the contract. Skipped, with the build's reason, where the extension cannot be built."""

import pytest
import torch
import torch.nn.functional as F
from kernel_cases import make_inputs, make_values, reference_output

from entropy_lens.kernels import attention_entropy, attention_with_entropy
from entropy_lens.kernels.native import NativeState, native_available, native_module, native_status

pytestmark = pytest.mark.skipif(not native_available(), reason=f"native kernel {native_status()}")


def native(q, k, v, softmax_scale, **kw):
    """(output, entropy, sink mass) of the native kernel's one pass."""
    rows = attention_with_entropy(q, k, v, softmax_scale=softmax_scale, backend="native", **kw)
    return rows.out, rows["entropy"], rows["sink_mass"]


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
    out, h, _ = native(q, k, v, **kw)
    assert (h - ref_h).abs().max().item() <= 1e-5
    assert (out.double() - ref_out).abs().max().item() <= 1e-5


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
    out, h, _ = native(q, k, v, 64**-0.5)
    assert (out - want).abs().max().item() <= 2e-6
    ref = attention_entropy(q, k, softmax_scale=64**-0.5, backend="reference")
    assert (h - ref).abs().max().item() <= 1e-5


def test_rows_without_keys_and_block_size_one():
    q, k = make_inputs(1, 2, 1, 12, 5)
    v = make_values(1, 1, 5)
    out, h, _ = native(q, k, v, 0.3, block_q=4, block_k=2)
    assert torch.equal(h[..., :7], torch.zeros(1, 2, 7)) and torch.equal(out[:, :7], torch.zeros(1, 7, 2, 12))
    ref = attention_entropy(q, k, softmax_scale=0.3, backend="reference")
    for bq, bk in [(1, 1), (4, 2)]:
        got = attention_entropy(q, k, softmax_scale=0.3, backend="native", block_q=bq, block_k=bk)
        assert (got - ref).abs().max().item() <= 1e-5
    keep = torch.zeros(1, 5, dtype=torch.bool)  # a fully padded sequence
    out, h, _ = native(q[..., -5:, :], k, v, 0.3, mask=keep)
    assert torch.equal(h, torch.zeros(1, 2, 5)) and torch.equal(out, torch.zeros(1, 5, 2, 12))


def test_threads_change_nothing():
    """`--threads` sets torch's intra-op pool, which the kernel's parallel_for runs on: each block is
    one thread's, so the numbers are the same bit for bit at any thread count."""
    q, k = make_inputs(2, 6, 2, 200, 200)
    v = make_values(2, 2, 200)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = native(q, k, v, 0.3)
        torch.set_num_threads(2)
        two = native(q, k, v, 0.3)
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
        native(q, k, v, 0.3, sofcap=2.0)  # a misspelt keyword is never ignored
    with pytest.raises(ValueError, match="v must be"):
        native(q, k, v[:, :, :7], 0.3)
    with pytest.raises(ValueError, match="window"):
        native(q, k, v, 0.3, causal=False, window=3)
    with pytest.raises(ValueError, match="sinks"):
        native(q, k, v, 0.3, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match="block_q"):
        native(q, k, v, 0.3, block_q=0)
