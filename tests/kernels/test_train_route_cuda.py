"""The CUDA training route (kernels/train.py, kernel "triton"): the Triton forward's output, statistics
and log-sum-exp, flash's CUDA backward (`aten._flash_attention_backward`) from them.

Without a GPU: the route each case takes, asked for device "cuda" with CPU tensors; and, in a child
process under TRITON_INTERPRET=1, tests/triton_train_interp_cases.py (the forward's lse against float64,
and the route's glue driven through a stand-in for the CUDA op that computes with the CPU flash backward).
On a GPU (opt in: `pytest -m gpu`; benchmarks/gpu_checks.sh's train stage): the real route against
sdpa's gradients, at the kernel and on every architecture family test_train_route.py covers, under
flash-attention's rule (the error against float64 at most twice the plain step's own in the same dtype).
"""

import copy
from pathlib import Path

import pytest
import torch
from architectures import SUPPORTED, build, ids_and_mask
from train_cases import (
    ALIBI,
    EAGER_REFERENCE,
    FLOAT32_ONLY,
    OWN_ATTENTION,
    allowed_keys,
    max_error,
    reference_attention,
    sdpa_attention,
    step_grads,
)
from triton_interp_plugin import run_under_the_interpreter

from entropy_lens.capture import EntropyRecorder
from entropy_lens.flags import Measure, Stats
from entropy_lens.kernels import ScoreMods
from entropy_lens.kernels.train import attention_train, capability_refusal, train_form, train_refusal

HERE = Path(__file__).parents[1]  # tests/, where the case files are
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _qkv(dtype=torch.bfloat16, B=2, H=4, Hkv=2, T=12, S=12, D=8):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, h, n, D, generator=g).to(dtype) for h, n in ((H, T), (Hkv, S), (Hkv, S)))


def _sliding_mask(B, T, S, window, pad=0):
    """transformers' (B, 1, T, S) bool mask: causal bottom-right, a window, `pad` left-padded keys of row 0."""
    rows, keys = torch.arange(T).view(-1, 1) + S - T, torch.arange(S).view(1, -1)
    band = (keys <= rows) & (keys > rows - window)
    mask = band.expand(B, 1, T, S).clone()
    mask[0, ..., :pad] = False
    return mask


def test_route_for_cuda_decided_without_a_gpu():
    """train_refusal(..., device="cuda") on CPU tensors: what the CUDA route takes (float16/bfloat16, GQA,
    a window given or read off transformers' mask) and the reason of each refusal."""
    q, k, v = _qkv()
    causal = ScoreMods.build(q, k)
    assert train_refusal(q, k, v, causal, device="cuda") is None
    assert train_refusal(*_qkv(torch.float16), ScoreMods.build(q, k, window=3), device="cuda") is None
    # transformers' sliding-window mask without padding: no mask left, its window kept
    mods, why = train_form(q, k, v, ScoreMods.build(q, k, mask=_sliding_mask(2, 12, 12, 4)), device="cuda")
    assert why is None and mods.mask is None and mods.window == 4
    assert train_form(q, k, v, causal, device="cpu") == (causal, None)  # the CPU route keeps the mask
    padded = ScoreMods.build(q, k, mask=_sliding_mask(2, 12, 12, 4, pad=3))
    assert train_refusal(q, k, v, padded, device="cuda").startswith("key padding")
    per_head = torch.rand(1, 4, 12, 12, generator=torch.Generator().manual_seed(1)) > 0.3
    per_head[..., 0] = True
    masked = ScoreMods.build(q, k, mask=per_head)
    assert train_refusal(q, k, v, masked, device="cuda").startswith("a mask per query or per head")
    q32, k32, v32 = _qkv(torch.float32)
    assert "float16 and bfloat16" in train_refusal(q32, k32, v32, causal, device="cuda")
    assert train_refusal(q32, k32, v32, causal, device="cpu") is None  # the CPU route takes float32
    big = _qkv(D=264)
    assert "above 256" in train_refusal(*big, ScoreMods(), device="cuda")
    assert train_refusal(q, k, v, ScoreMods.build(q, k, softcap=30.0), device="cuda").startswith("softcap")


def test_the_gpus_flash_backward_runs_on():
    """flash_api.cpp's checks: sm_8x and sm_90; head sizes 193-224 only on sm_80 and sm_90."""
    assert capability_refusal((8, 0), 224) is None and capability_refusal((9, 0), 200) is None
    assert capability_refusal((8, 9), 128) is None and capability_refusal((8, 6), 256) is None
    assert "sm_75" in capability_refusal((7, 5), 64)
    assert "sm_100" in capability_refusal((10, 0), 64)
    assert "193-224" in capability_refusal((8, 6), 220) and "193-224" in capability_refusal((8, 9), 193)


def test_cuda_route_refuses_in_one_line():
    q, k, v = _qkv(torch.float32)
    with pytest.raises(ValueError, match="float32 tensors on CUDA.*statistics pass"):
        attention_train(q, k, v, 0.3, ScoreMods.build(q, k), kernel="triton")
    with pytest.raises(ValueError, match="backward op on the 'triton'"):
        attention_train(q, k, v, 0.3, ScoreMods.build(q, k), kernel="torch_chunked", backward=print)


@pytest.mark.slow
def test_cuda_route_under_the_interpreter():
    """tests/triton_train_interp_cases.py in its own process under TRITON_INTERPRET=1."""
    pytest.importorskip("triton")
    run_under_the_interpreter([HERE / "triton_train_interp_cases.py"])


# (B, Hq, Hkv, T, S, D, causal, window, per-head trainable scales): test_train_route.py's shapes without
# key padding (which the CUDA route refuses), and real sizes
CUDA_SHAPES = [
    (2, 4, 2, 33, 33, 16, True, None, False),
    (1, 4, 1, 17, 40, 8, True, None, True),
    (2, 2, 2, 24, 24, 8, True, 5, False),
    (1, 6, 3, 12, 20, 8, False, None, True),
    (1, 2, 1, 24, 24, 12, True, None, False),
    (2, 8, 2, 1024, 1024, 64, True, None, False),
    (1, 8, 1, 700, 1500, 128, True, 256, True),
]


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", CUDA_SHAPES)
def test_cuda_kernel_gradients_within_twice_plain_sdpa(shape, dtype):
    """The real route on CUDA: the output and every gradient (q, k, v, a trainable per-head scale) within
    twice sdpa's error in the same dtype on CUDA, against float64 (materialised, on the CPU)."""
    B, H, Hkv, T, S, D, causal, window, per_head = shape
    g = torch.Generator().manual_seed(sum(shape[:6]))
    q, k, v = (
        torch.randn(B, h, n, D, generator=g, dtype=torch.float64) for h, n in ((H, T), (Hkv, S), (Hkv, S))
    )
    scale = torch.linspace(0.05, 0.2, H, dtype=torch.float64) if per_head else torch.full((H,), D**-0.5)
    grad_out = torch.randn(B, T, H, D, generator=g, dtype=torch.float64)
    allowed = allowed_keys(T, S, causal, None, window)

    def grads(dtype, fn, device):
        leaves = [x.to(device, dtype).requires_grad_(True) for x in (q, k, v, scale)]
        out = fn(*leaves)
        got = torch.autograd.grad(out, leaves[: 4 if per_head else 3], grad_out.to(device, dtype))
        return [x.cpu() for x in (out, *got)]

    def ours(q_, k_, v_, s_):
        mods = ScoreMods.build(q_, k_, causal=causal, window=window)
        softmax_scale = s_ if per_head else D**-0.5
        return attention_train(
            q_, k_, v_, softmax_scale, mods, kernel="triton", measure=Measure(stats=Stats(("entropy",)))
        ).out

    truth = grads(torch.float64, lambda *a: reference_attention(*a, allowed), "cpu")
    got = grads(dtype, ours, "cuda")
    reference = grads(dtype, lambda *a: sdpa_attention(*a, allowed.cuda()), "cuda")
    names = ("out", "dq", "dk", "dv", "dscale")[: 5 if per_head else 4]
    for name, a, b, t in zip(names, got, reference, truth, strict=False):
        err, err_plain = (a.double() - t).abs().max().item(), (b.double() - t).abs().max().item()
        assert a.dtype == dtype and err <= 2 * err_plain + 1e-6, (name, err, err_plain)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_cuda_monitored_step_gradients(model_type):
    """Every family of test_train_route.py on CUDA in bfloat16, an unpadded batch: the route recorded
    ("fused-train" with the Triton kernel where flash's backward takes the scores, else the family's
    own) and the gradients within twice the plain bfloat16 step's error against float64 (on the CPU)."""
    model = build(model_type, SUPPORTED[model_type][0])
    kept = OWN_ATTENTION.get(model_type) or ALIBI.get(model_type)
    ids, _ = ids_and_mask("none")
    mask = torch.ones_like(ids)  # transformers' causal mask, which pads no key
    reference = copy.deepcopy(model)
    if model_type in EAGER_REFERENCE:
        reference.set_attn_implementation("eager")
    ids_cuda = ids.cuda()
    plain = step_grads(copy.deepcopy(reference).cuda().bfloat16(), ids_cuda, mask.cuda())
    model = model.cuda().bfloat16()
    recorder = EntropyRecorder(model)
    monitored = step_grads(model, ids_cuda, mask.cuda(), recorder)
    assert recorder.session.paths == {kept or "fused-train"}
    if not kept:
        assert recorder.session.backends == {"triton"}
    plain, monitored = [[g.cpu() for g in gs] for gs in (plain, monitored)]
    if model_type in FLOAT32_ONLY:  # the model's own attention computed the output: the plain step's
        scale = max(g.abs().max().item() for g in plain)
        assert max_error(monitored, [g.double() for g in plain]) <= 1e-2 * scale
    else:
        truth = step_grads(copy.deepcopy(reference).double(), ids, mask)
        err, err_plain = max_error(monitored, truth), max_error(plain, truth)
        assert err <= 2 * err_plain + 1e-6, (err, err_plain)


@pytest.mark.gpu
@GPU
def test_cuda_padded_batch_keeps_the_separate_route():
    """A left-padded batch on CUDA: flash's CUDA backward takes no key padding, so the step runs sdpa with
    autograd beside a statistics pass, its gradients within twice the plain step's error against float64."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = ids_and_mask("left")
    truth = step_grads(copy.deepcopy(model).double(), ids, mask)
    ids, mask, model = ids.cuda(), mask.cuda(), model.cuda().bfloat16()
    plain = step_grads(copy.deepcopy(model), ids, mask)
    recorder = EntropyRecorder(model)
    monitored = step_grads(model, ids, mask, recorder)
    assert recorder.session.paths == {"sdpa-then-entropy"}
    err, err_plain = (
        max_error([g.cpu() for g in monitored], truth),
        max_error([g.cpu() for g in plain], truth),
    )
    assert err <= 2 * err_plain + 1e-6, (err, err_plain)
