"""The Triton kernel on a real GPU at real sizes (opt in: `pytest -m gpu`; skipped without CUDA).
On a GPU the shared grids (kernel_cases.RUNNABLE, in test_kernels*.py) run the kernel at small sizes in any
pytest run, and `pytest tests/triton_interp_cases.py` runs its own cases."""

import numpy as np
import pytest
import torch

pytest.importorskip("triton")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from kernel_cases import make_inputs, plain_pytorch_entropy

from entropy_lens.kernels import attention_entropy, attention_with_entropy


@pytest.mark.parametrize("Hq,Hkv", [(8, 8), (32, 4), (8, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("T,S", [(4096, 4096), (1000, 5000), (3000, 1000)], ids=["square", "T<S", "T>S"])
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"])
@pytest.mark.parametrize("causal", [True, False])
def test_interpreter_grid_at_real_sizes_fp32(Hq, Hkv, T, S, mask_kind, causal):
    """The interpreter's grid (tests/triton_interp_cases.py) at thousands of tokens, head_dim 64."""
    q, k = (x.cuda() for x in make_inputs(2, Hq, Hkv, T, S, D=64))
    keep = torch.ones(2, S, dtype=torch.bool, device="cuda")
    keep[0, : S // 3] = False
    mask = {"none": None, "key_padding": keep, "4d_per_head": torch.rand(2, Hq, T, S, device="cuda") > 0.4}[
        mask_kind
    ]
    scale = torch.linspace(0.05, 0.25, Hq, device="cuda")
    got = attention_entropy(q, k, softmax_scale=scale, causal=causal, mask=mask, backend="triton")
    exact = attention_entropy(q, k, softmax_scale=scale, causal=causal, mask=mask, backend="torch_chunked")
    assert (got - exact).abs().max().item() <= 1e-4


@pytest.mark.parametrize("T", [2048, 8192, 16384])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_long_sequences_match_torch_chunked(T, dtype):
    q, k = (x.cuda() for x in make_inputs(1, 32, 4, T, T, D=64, dtype=dtype))
    scale = torch.full((32,), 64**-0.5, device="cuda")
    got = attention_entropy(q, k, softmax_scale=scale, backend="triton")
    exact = attention_entropy(q, k, softmax_scale=scale, backend="torch_chunked")  # fp32 streaming, exact
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert (got - exact).abs().max().item() <= tol


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_twice_plain_pytorch_gpu(dtype):
    q, k = (x.cuda() for x in make_inputs(2, 8, 2, 1024, 1024, D=64, dtype=dtype))
    scale = 64**-0.5
    ref = attention_entropy(q, k, softmax_scale=scale, backend="reference")
    got = attention_entropy(q, k, softmax_scale=scale, backend="triton")
    kk = k.repeat_interleave(4, dim=1)
    plain = plain_pytorch_entropy(q, kk, scale, 1024, 1024)
    assert (got - ref).abs().max().item() <= 2 * (plain - ref).abs().max().item()


def test_key_padding_and_gqa_on_gpu():
    q, k = (x.cuda() for x in make_inputs(2, 32, 4, 4096, 4096, D=64, dtype=torch.bfloat16))
    keep = torch.ones(2, 4096, dtype=torch.bool, device="cuda")
    keep[0, :1000] = False
    got = attention_entropy(q, k, softmax_scale=0.125, mask=keep, backend="triton")
    exact = attention_entropy(q, k, softmax_scale=0.125, mask=keep, backend="torch_chunked")
    assert (got - exact).abs().max().item() <= 2e-2


@pytest.mark.parametrize("window", [100, 4096])
@pytest.mark.parametrize("fused", [False, True])
def test_sliding_window_at_real_sizes(window, fused):
    q, k = (x.cuda() for x in make_inputs(2, 32, 4, 8192, 8192, D=64))
    keep = torch.ones(2, 8192, dtype=torch.bool, device="cuda")
    keep[0, :1000] = False
    scale = torch.full((32,), 0.125, device="cuda")
    if fused:
        rows = attention_with_entropy(
            q, k, torch.randn_like(k), softmax_scale=scale, mask=keep, window=window, backend="triton"
        )
        got = rows["entropy"]
    else:
        got = attention_entropy(q, k, softmax_scale=scale, mask=keep, window=window, backend="triton")
    exact = attention_entropy(q, k, softmax_scale=scale, mask=keep, window=window, backend="torch_chunked")
    assert (got - exact).abs().max().item() <= 1e-4


def test_fused_capture_on_gpu_within_twice_the_separate_error():
    import copy

    from tiny import make_tiny_model

    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.capture.fused import PROCESS_CHOICES

    # 4 layers: "auto" tries each path twice on the real layers, so one forward ends with a choice
    ref_model = make_tiny_model(n_heads=8, n_kv_heads=2, head_dim=64, n_layers=4).cuda()
    model = copy.deepcopy(ref_model).to(torch.bfloat16)
    ids = torch.randint(2, 300, (1, 4096), device="cuda")
    runs = {}
    for name, m, kw in [
        ("ref", ref_model, {"backend": "torch_chunked"}),
        ("fused", model, {"fused": "on"}),
        ("separate", model, {"fused": "off"}),
        ("auto", model, {"fused": "auto"}),
    ]:
        with torch.no_grad(), EntropyRecorder(m, **kw) as rec:
            runs[name] = (m(ids).logits.float(), rec)
    assert runs["fused"][1].session.paths == {"triton-fused"}
    assert runs["separate"][1].session.paths == {"sdpa-then-entropy"}
    assert PROCESS_CHOICES.chosen and runs["auto"][1].session.paths <= {"triton-fused", "sdpa-then-entropy"}
    for what, get in [("logits", lambda r: r[0]), ("entropy", lambda r: torch.from_numpy(r[1].entropy))]:
        err = {n: (get(runs[n]) - get(runs["ref"])).abs().max().item() for n in ("fused", "separate")}
        assert err["fused"] <= 2 * err["separate"] + 1e-6, (what, err)


def test_recorder_holds_no_sums_on_the_gpu_and_matches_the_cpu():
    """Each layer's entropy goes to the host by an asynchronous copy and is summed there in float64:
    after a forward the GPU holds exactly what it held before it."""
    from tiny import make_tiny_model

    from entropy_lens.capture import EntropyRecorder

    model = make_tiny_model(n_heads=8, n_kv_heads=2, head_dim=64)
    ids = torch.randint(2, 300, (2, 2048))
    with torch.no_grad(), EntropyRecorder(model, backend="torch_chunked") as cpu:
        model(ids)
    model.cuda()
    with torch.no_grad(), EntropyRecorder(model, fused="off") as rec:
        model(ids[:1].cuda())  # warm-up: autotuning, the allocator's pools
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        model(ids.cuda())
        torch.cuda.synchronize()
        after = torch.cuda.memory_allocated()
    assert after == before
    first = ids[:1]
    with torch.no_grad(), EntropyRecorder(model.cpu(), backend="torch_chunked") as one:
        model(first)
    np.testing.assert_allclose(rec.sums["entropy"], cpu.sums["entropy"] + one.sums["entropy"], atol=1e-3)
    assert rec.count.tolist() == [3] * 2048
