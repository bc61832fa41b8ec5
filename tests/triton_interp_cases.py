"""The Triton kernel against the float64 reference under the interpreter (CPU), on the grid the
torch path is tested on. Not collected by default (the name does not start with test_):
tests/test_triton_interp.py runs this file in its own process with TRITON_INTERPRET=1, so the
interpreter never leaks into other tests. On a GPU it runs as is: `pytest tests/triton_interp_cases.py`.
"""

import os

import pytest
import torch

pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    pytest.skip("needs TRITON_INTERPRET=1 (set before import) or a CUDA device", allow_module_level=True)

from test_kernels import _inputs, _masks, _plain_pytorch_entropy

from entropy_lens.kernels import attention_entropy

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy evaluates both sides of tl.where


def _run(q, k, **kw):
    got = attention_entropy(q.to(DEVICE), k.to(DEVICE), impl="triton", **kw).cpu()
    ref = attention_entropy(q, k, impl="reference", **kw)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    return got, ref


@pytest.mark.parametrize("B", [1, 2])
@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("T,S", [(33, 33), (19, 45), (64, 64), (12, 5)], ids=["square", "T<S", "2blocks", "T>S"])
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_reference_fp32(B, Hq, Hkv, T, S, mask_kind, causal):
    q, k = _inputs(B, Hq, Hkv, T, S)
    mask = _masks(B, Hq, T, S)[mask_kind]
    scale = torch.linspace(0.1, 0.6, Hq)  # per-head scales
    got, ref = _run(q, k, scale=scale, causal=causal, mask=None if mask is None else mask.to(DEVICE))
    assert (got - ref).abs().max().item() <= 1e-5


def test_first_key_block_fully_masked_and_fully_padded_rows():
    q, k = _inputs(2, 4, 2, 40, 90)
    keep = torch.ones(2, 90, dtype=torch.bool)
    keep[0, :70] = False  # rows' first two key blocks (32 wide) see nothing: m = -inf there
    keep[1] = False  # a fully padded sequence: every row 0
    got, ref = _run(q, k, scale=0.4, mask=keep.to(DEVICE))
    assert torch.equal(got[1], torch.zeros(4, 40)) and (got - ref).abs().max().item() <= 1e-5


def test_peaked_rows_and_head_dim_not_a_power_of_two():
    q, k = _inputs(1, 2, 1, 50, 50, D=24)
    got, ref = _run(q, k, scale=torch.tensor([40.0, 0.05]))  # near one-hot vs near uniform
    assert (got - ref).abs().max().item() <= 1e-4


def test_strided_inputs():
    q, k = _inputs(2, 4, 2, 30, 30)
    q_t, k_t = q.transpose(1, 2).contiguous().transpose(1, 2), k.transpose(1, 2).contiguous().transpose(1, 2)
    assert not q_t.is_contiguous()  # (B, T, H, D) memory, as a model's projections lay it out
    got, ref = _run(q_t, k_t, scale=0.3)
    assert (got - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_within_twice_plain_pytorch(dtype):
    q, k = _inputs(2, 4, 4, 96, 96, D=32, dtype=dtype)
    scale = 32**-0.5
    got, ref = _run(q, k, scale=scale)
    err_plain = (_plain_pytorch_entropy(q, k, scale, 96, 96) - ref).abs().max().item()
    assert err_plain > 0 and (got - ref).abs().max().item() <= 2 * err_plain


def test_near_1k_tokens_gqa_bf16():
    q, k = _inputs(1, 4, 2, 1000, 1000, D=32, dtype=torch.bfloat16)
    got, ref = _run(q, k, scale=torch.tensor([0.1, 0.2, 0.3, 0.4]))
    assert (got - ref).abs().max().item() <= 1e-3
