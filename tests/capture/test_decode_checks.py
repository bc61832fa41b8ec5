"""A decode step checks its new keys and values for non-finite values, not the whole cache again: the
cache an earlier forward of the session checked is continued; anything else is checked whole."""

import pytest
import torch
from capture_cases import StatsTo
from tiny import make_tiny_model

from entropy_lens.capture.attention import entropy_lens_attention
from entropy_lens.capture.call import Session, activate
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure
from entropy_lens.kernels import native_available, native_status


def _call(session, attn, q, k, v):
    with torch.no_grad(), activate(session):
        return entropy_lens_attention(attn, q, k, v, None)


def _inputs(S: int, T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, 4, T, 16, generator=g),
        torch.randn(1, 2, S, 16, generator=g),
        torch.randn(1, 2, S, 16, generator=g),
    )


def test_a_decode_step_checks_its_new_keys_and_a_new_cache_whole(monkeypatch):
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn
    session = Session(reports=StatsTo(lambda layer, stats, offset: None))
    q, k, v = _inputs(8, 8)
    _call(session, attn, q, k, v)  # the prefill: every key checked
    summed = []
    real_sum = torch.Tensor.sum
    monkeypatch.setattr(
        torch.Tensor, "sum", lambda x, *a, **kw: summed.append(x.shape) or real_sum(x, *a, **kw)
    )
    q1, k1, v1 = _inputs(9, 1, seed=1)
    k1[:, :, :8], v1[:, :, :8] = k, v  # the cache continued, one new key
    _call(session, attn, q1, k1, v1)
    assert summed[:3] == [q1.shape, (1, 2, 1, 16), (1, 2, 1, 16)]  # the query, the new key and value
    monkeypatch.undo()
    k2, v2 = torch.cat([k1, torch.randn(1, 2, 1, 16)], 2), torch.cat([v1, torch.randn(1, 2, 1, 16)], 2)
    k2[0, 1, 9, 3] = float("nan")  # the next step's new key is not finite: refused
    with pytest.raises(EntropyLensError, match="layer 0's key"):
        _call(session, attn, q1, k2, v2)
    fresh = Session(reports=StatsTo(lambda layer, stats, offset: None))
    q3, k3, v3 = _inputs(12, 1, seed=2)
    k3[0, 0, 2, 0] = float("inf")  # a cache this session never checked: checked whole
    with pytest.raises(EntropyLensError, match="layer 0's key"):
        _call(fresh, attn, q3, k3, v3)


@pytest.mark.skipif(not native_available(), reason=f"native kernel {native_status()}")
def test_a_decode_steps_scores_beyond_float32_are_refused_from_its_caches_largest_key():
    """The bound a decode step's kernels skip is the capture's, from max|k| kept over the cache: a new
    key that would take the scores beyond float32's range is refused as a whole pass would refuse it.
    The native kernel's: it forms scores in float32 unchecked, so it refuses by the bound (torch_chunked
    checks the scores it forms and measures them exactly; fused "auto" may choose either, by timing)."""
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn
    session = Session(
        reports=StatsTo(lambda layer, stats, offset: None),
        measure=Measure.parse(backend="native", fused="on"),
    )
    q, k, v = _inputs(8, 8)
    _call(session, attn, q, k, v)
    q1, k1, v1 = _inputs(9, 1, seed=1)
    k1[:, :, :8], v1[:, :, :8] = k, v
    k1[:, :, 8] *= 1e19  # finite, but q·k leaves float32's range
    with pytest.raises(ValueError, match="float32"):
        _call(session, attn, q1 * 1e19, k1, v1)
