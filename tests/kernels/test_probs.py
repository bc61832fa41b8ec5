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
        ((0, 7), r"at most 6; pass rows=\(0, 6\)"),  # a pair, cut to the rows there are
        ((-1, 2), r"at least 0 .*; pass rows=\(0, 2\)"),
        ((7, 9), r"pass rows=\(0, 6\)"),  # nothing left when cut: the whole
        (3, "start, stop"),
    ):
        with pytest.raises(EntropyLensError, match=match):
            attention_probs(q, k, softmax_scale=0.3, rows=bad)
    with pytest.raises(TypeError, match="unexpected keyword"):
        attention_probs(q, k, softmax_scale=0.3, row=(0, 2))


def test_a_slice_above_max_bytes_is_refused_in_one_line_unless_it_is_raised():
    """The slice's size is B · Hq · rows · keys float32 values; above max_bytes (MAX_BYTES by default)
    the call says how large and how to allow it, before any pass runs."""
    from entropy_lens.kernels.probs import MAX_BYTES

    q, k = make_inputs(2, 4, 2, 16, 16, 8)
    size = 2 * 4 * 10 * 12 * 4
    with pytest.raises(
        EntropyLensError, match=rf"is {size:,} bytes .*above max_bytes={size - 1:,}; .*max_bytes={size} "
    ) as err:
        attention_probs(q, k, softmax_scale=0.3, rows=(6, 16), keys=(2, 14), max_bytes=size - 1)
    assert "\n" not in str(err.value)
    got = attention_probs(q, k, softmax_scale=0.3, rows=(6, 16), keys=(2, 14), max_bytes=size)
    assert got.shape == (2, 4, 10, 12)
    # the default: a 16K x 16K slice of one head (1 GiB) is refused before any pass runs
    q, k = torch.zeros(1, 1, 16384, 8), torch.zeros(1, 1, 16384, 8)
    assert 16384 * 16384 * 4 > MAX_BYTES
    with pytest.raises(EntropyLensError, match=rf"\(1,024.0 MiB\), above max_bytes={MAX_BYTES:,}"):
        attention_probs(q, k, softmax_scale=0.3)
    for bad in (0, 1.5, True):
        with pytest.raises(EntropyLensError, match="max_bytes"):
            attention_probs(q[:, :, :4], k[:, :, :4], softmax_scale=0.3, max_bytes=bad)
