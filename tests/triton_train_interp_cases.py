"""The CUDA training route (kernels/train.py, kernel "triton") on CPU under the Triton interpreter: the
Triton forward's log-sum-exp against float64, and the route's glue (layouts, the head-size padding, GQA,
the scale, the lse's units, the window) driven through an op that behaves as flash's CUDA backward
(`aten._flash_attention_backward`) and computes with PyTorch's CPU flash backward, held to
flash-attention's rule against float64 autograd.

Not collected by default (the name does not start with test_): tests/kernels/test_train_route_cuda.py runs it in
its own process with TRITON_INTERPRET=1. On a GPU it runs as is (`pytest tests/triton_train_interp_cases.py`),
the CPU op standing in for the CUDA one there too.
"""

import math
import os

import pytest
import torch

pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    pytest.skip("needs TRITON_INTERPRET=1 (set before import) or a CUDA device", allow_module_level=True)

from train_cases import allowed_keys, reference_attention, sdpa_attention, train_inputs

from entropy_lens.flags import Measure, Stats
from entropy_lens.kernels import ScoreMods
from entropy_lens.kernels.train import attention_train, log_sum_exp
from entropy_lens.kernels.triton_entropy import stream_triton

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy evaluates both sides of tl.where
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
CALLS = []  # what the stand-in op was called with: (B, T, H, D) of q, (B, S, Hkv, D) of k


def flash_backward_on_cpu(
    grad_out,
    q,
    k,
    v,
    out,
    lse,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    rng_state,
    unused,
    *,
    scale=None,
    window_size_left=None,
    window_size_right=None,
):
    """`aten._flash_attention_backward` as flash_api.cpp's `mha_bwd` takes its arguments (checked as it
    checks them), computed by `aten._scaled_dot_product_flash_attention_for_cpu_backward` with flash's
    masks (causal bottom-right, the window [i + S − T − left, i + S − T + right]) as a float mask."""
    B, T, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    assert q.dtype in (torch.float16, torch.bfloat16)
    assert k.dtype == v.dtype == out.dtype == grad_out.dtype == q.dtype
    assert all(x.stride(-1) == 1 for x in (grad_out, q, k, v, out))
    assert k.shape == v.shape == (B, S, Hkv, D) and out.shape == grad_out.shape == (B, T, H, D)
    assert D % 8 == 0 and D <= 256 and H % Hkv == 0
    assert lse.dtype == torch.float32 and lse.shape == (B, H, T) and lse.is_contiguous()
    assert cum_seq_q is None and cum_seq_k is None and (max_q, max_k) == (T, S) and dropout_p == 0.0
    CALLS.append((tuple(q.shape), tuple(k.shape)))
    left = math.inf if window_size_left is None or window_size_left < 0 else window_size_left
    right = (
        0
        if is_causal
        else (math.inf if window_size_right is None or window_size_right < 0 else window_size_right)
    )
    rows = torch.arange(T).view(-1, 1) + S - T
    keys = torch.arange(S).view(1, -1)
    allowed = (keys >= rows - left) & (keys <= rows + right)
    mask = torch.zeros(T, S, dtype=q.dtype).masked_fill_(~allowed, -math.inf).to(q.device)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        *(x.transpose(1, 2).cpu() for x in (grad_out, q, k, v, out)),
        lse.cpu(),
        0.0,
        False,
        attn_mask=mask.cpu(),
        scale=scale,
    )
    return tuple(g.transpose(1, 2).to(q.device) for g in (dq, dk, dv))


# (B, Hq, Hkv, T, S, D, causal, window, left padding)
LSE_SHAPES = [
    (2, 4, 2, 40, 40, 16, True, None, False),  # GQA, square
    (1, 4, 1, 17, 40, 8, True, None, False),  # MQA, T < S bottom-right
    (1, 2, 2, 40, 17, 8, True, None, False),  # T > S: the first rows see no key (lse +inf)
    (2, 2, 2, 36, 36, 8, True, 5, False),  # a sliding window
    (1, 6, 3, 12, 20, 8, False, None, False),  # not causal
    (2, 4, 2, 33, 33, 16, True, None, True),  # left padding: rows that see no key
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", LSE_SHAPES)
def test_triton_lse_equals_float64_logsumexp(shape, dtype):
    """lse = m + ln l of the Triton forward's state equals the float64 log-sum-exp of the scaled scores
    (of the inputs rounded to `dtype`), +∞ where a row sees no key; the output equals the float64 one."""
    B, H, Hkv, T, S, D, causal, window, pad = shape
    g = torch.Generator().manual_seed(sum(shape[:6]))
    q, k, v = (torch.randn(B, h, n, D, generator=g).to(dtype) for h, n in ((H, T), (Hkv, S), (Hkv, S)))
    scale = torch.linspace(0.2, 0.6, H)
    keep = None
    if pad:
        keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
        keep[0, ..., :5] = False
    on = [x.to(DEVICE) for x in (q, k, v)]
    mods = ScoreMods.build(
        *on[:2], causal=causal, window=window, mask=None if keep is None else keep.to(DEVICE)
    )
    state, out = stream_triton(*on, scale.to(DEVICE), mods)
    lse = log_sum_exp(state).cpu()
    allowed = allowed_keys(T, S, causal, keep, window)
    q64, k64 = q.double(), k.double().repeat_interleave(H // Hkv, 1)
    scores = (q64 * scale.double().view(1, -1, 1, 1)) @ k64.transpose(-1, -2)
    want = torch.logsumexp(scores.masked_fill(~allowed, -math.inf), -1)
    want = torch.where(want == -math.inf, math.inf, want)
    assert lse.dtype == torch.float32 and lse.shape == (B, H, T)
    assert torch.equal(lse.isinf(), want.isinf()) and (lse > 0)[lse.isinf()].all()
    finite = want.isfinite()
    assert (lse[finite].double() - want[finite]).abs().max().item() <= 1e-5
    out64 = reference_attention(q.double(), k.double(), v.double(), scale.double(), allowed)
    assert out.shape == (B, T, H, D) and out.dtype == dtype
    assert (out.cpu().double() - out64).abs().max().item() <= (1e-5 if dtype == torch.float32 else 2e-2)


# (B, Hq, Hkv, T, S, D, causal, window, per-head trainable scales)
GRAD_SHAPES = [
    (2, 4, 2, 40, 40, 16, True, None, False),  # GQA: the op takes Hkv heads and sums dK, dV itself
    (1, 4, 1, 17, 40, 8, True, None, True),  # MQA, T < S bottom-right, per-head scales
    (2, 2, 2, 36, 36, 8, True, 5, False),  # a sliding window: window_size_left = W − 1
    (1, 6, 3, 12, 20, 8, False, None, True),  # not causal, T != S
    (1, 2, 1, 24, 24, 12, True, None, False),  # head size 12: zero-padded to 16 for the op
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", GRAD_SHAPES)
def test_cuda_route_gradients_through_flash_backward(shape, dtype):
    """attention_train(kernel="triton") with the stand-in op: the output and every gradient (q, k, v and
    a trainable per-head scale) within twice plain sdpa's error in the same dtype, against float64."""
    B, H, Hkv, T, S, D, causal, window, per_head = shape
    q, k, v, scale, g = train_inputs(B, H, Hkv, T, S, D, per_head=per_head, seed=sum(shape[:6]))
    grad_out = torch.randn(B, T, H, D, generator=g, dtype=torch.float64)

    def grads(dtype, fn, device="cpu"):
        leaves = [x.to(device, dtype).requires_grad_(True) for x in (q, k, v, scale)]
        out = fn(*leaves)
        got = torch.autograd.grad(out, leaves[: 4 if per_head else 3], grad_out.to(device, dtype))
        return [x.cpu() for x in (out, *got)]

    def ours(q_, k_, v_, s_):
        mods = ScoreMods.build(q_, k_, causal=causal, window=window)
        softmax_scale = s_ if per_head else 0.4
        kw = {
            "kernel": "triton",
            "measure": Measure(stats=Stats(("entropy",))),
            "backward": flash_backward_on_cpu,
        }
        return attention_train(q_, k_, v_, softmax_scale, mods, **kw).out

    allowed = allowed_keys(T, S, causal, None, window)
    truth = grads(torch.float64, lambda *a: reference_attention(*a, allowed))
    CALLS.clear()
    got = grads(dtype, ours, DEVICE)
    assert CALLS == [((B, T, H, D + (-D % 8)), (B, S, Hkv, D + (-D % 8)))]  # one call, (B, T, H, D) layouts
    reference = grads(dtype, lambda *a: sdpa_attention(*a, allowed))
    names = ("out", "dq", "dk", "dv", "dscale")[: 5 if per_head else 4]
    for name, a, b, t in zip(names, got, reference, truth, strict=False):
        err, err_plain = (a.double() - t).abs().max().item(), (b.double() - t).abs().max().item()
        assert a.dtype == dtype and a.shape == t.shape and err <= 2 * err_plain + 1e-7, (name, err, err_plain)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_route_under_autocast_follows_its_dtype(dtype):
    """attention_train(kernel="triton") under autocast with float32 queries and keys (a model's after
    RoPE) beside values in autocast's dtype: it runs in autocast's dtype, as sdpa does (which crashed the
    backward), q's gradient comes back in float32, and the output and every gradient stay within twice
    plain sdpa's error under the same autocast, against float64."""
    B, H, Hkv, T, S, D = 2, 4, 2, 40, 40, 16
    q, k, v, scale, g = train_inputs(B, H, Hkv, T, S, D, per_head=False, seed=7)
    grad_out = torch.randn(B, T, H, D, generator=g, dtype=torch.float64)
    allowed = allowed_keys(T, S, True, None, None)

    def grads(fn, dtypes, device="cpu"):
        leaves = [x.to(device, d).requires_grad_(True) for x, d in zip((q, k, v), dtypes, strict=True)]
        with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtypes[2] == dtype):
            out = fn(*leaves)
        got = torch.autograd.grad(out, leaves, grad_out.to(device, out.dtype))
        return [x.cpu() for x in (out, *got)]

    def ours(q_, k_, v_):
        kw = {
            "kernel": "triton",
            "measure": Measure(stats=Stats(("entropy",))),
            "backward": flash_backward_on_cpu,
        }
        return attention_train(q_, k_, v_, 0.4, ScoreMods.build(q_, k_), **kw).out

    mixed = (torch.float32, torch.float32, dtype)
    truth = grads(lambda *a: reference_attention(*a, scale, allowed), (torch.float64,) * 3)
    got = grads(ours, mixed, DEVICE)
    reference = grads(lambda *a: sdpa_attention(*a, scale.float(), allowed), mixed)
    for name, a, b, t in zip(("out", "dq", "dk", "dv"), got, reference, truth, strict=True):
        err, err_plain = (a.double() - t).abs().max().item(), (b.double() - t).abs().max().item()
        assert a.shape == t.shape and err <= 2 * err_plain + 1e-7, (name, err, err_plain)
    assert got[0].dtype == dtype and got[1].dtype == torch.float32 and got[3].dtype == dtype
