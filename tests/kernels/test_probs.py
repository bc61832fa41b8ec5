"""attention_probs: exact slices of the attention probabilities, each row normalised over every key it
may see, equal to the float64 materialised probabilities on every CPU backend over the kernels' grid
(head layouts, lengths, masks, causal or not, every score modifier)."""

import pytest
import torch
from kernel_cases import make_inputs
from kernel_grid import grid_kwargs, on_the_grid
from tolerances import sum_tolerance

from entropy_lens import attention_probs
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import ScoreMods, attention_probabilities
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.native import native_available

KERNELS = ["reference", "torch_chunked", *(["native"] if native_available() else [])]


@on_the_grid
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_slice_equals_the_float64_probabilities(kernel, Hq, Hkv, T, S, mask_kind, causal, case):
    B = 2
    q, k = make_inputs(B, Hq, Hkv, T, S, 8)
    kw = grid_kwargs(case, B, Hq, T, S, mask_kind, causal)
    if kw.get("window") is not None and not causal:
        kw.pop("window")
    mods = ScoreMods.build(q, k, **kw)
    want, _, _ = attention_probabilities(q, k, validate_scale(q, k, 0.4), mods)
    rows, keys = (T // 3, T), (S // 4, S - S // 4)
    got = attention_probs(q, k, softmax_scale=0.4, rows=rows, keys=keys, backend=kernel, **kw)
    assert got.dtype == torch.float32 and got.shape == (B, Hq, rows[1] - rows[0], keys[1] - keys[0])
    slice_ = want[:, :, rows[0] : rows[1], keys[0] : keys[1]]
    # a probability is e^(s − lse): s a D-term float32 dot product, lse a sum over S keys; its error is
    # p · (|Δs| + |Δlse|), each a sum's rounding relative to the scores' size (tests/tolerances.py)
    keys_per_head = k.double().repeat_interleave(Hq // Hkv, dim=1)
    largest = 0.4 * (q.double() @ keys_per_head.transpose(-1, -2)).abs().max().item()  # the largest |score|
    tol = sum_tolerance(S + q.shape[-1]) * (1 + largest)
    assert (got.double() - slice_).abs().max().item() <= tol, (kernel, case)


def test_the_whole_matrix_by_default_and_spans_checked():
    q, k = make_inputs(1, 2, 2, 6, 6, 8)
    whole = attention_probs(q, k, softmax_scale=0.3)
    want, _, _ = attention_probabilities(q, k, validate_scale(q, k, 0.3), ScoreMods.build(q, k))
    assert whole.shape == (1, 2, 6, 6) and (whole.double() - want).abs().max() <= 1e-6
    assert torch.allclose(whole.sum(-1), torch.ones(1, 2, 6))  # every row over every key it sees
    for bad, match in (
        ((3, 3), "is empty"),
        ((0, 7), "at most 6"),
        ((-1, 2), "at least 0"),
        (3, "start, stop"),
    ):
        with pytest.raises(EntropyLensError, match=match):
            attention_probs(q, k, softmax_scale=0.3, rows=bad)
    with pytest.raises(TypeError, match="unexpected keyword"):
        attention_probs(q, k, softmax_scale=0.3, row=(0, 2))
