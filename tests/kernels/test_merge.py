"""Key shards merged with `merge_states` give the unsplit entropy: the state is associative,
commutative and an empty shard is its identity (the basis of a ring / context-parallel scan)."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from entropy_lens.kernels import attention_entropy, entropy_from_state, merge_states, shard_state


def _inputs(B=2, Hq=6, Hkv=2, T=37, S=53, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, T, D, generator=g)
    k = torch.randn(B, Hkv, S, D, generator=g)
    scale = torch.linspace(0.3, 1.5, Hq)
    return q, k, scale


def _shards(q, k, scale, cuts, *, causal=True, mask=None, window=None):
    S = k.shape[2]
    bounds = [0, *cuts, S]
    return [
        shard_state(
            q,
            k[:, :, a:b],
            scale,
            key_offset=a,
            total_keys=S,
            causal=causal,
            mask=None if mask is None else mask[:, a:b],
            window=window,
            block_q=8,
            block_k=5,
        )
        for a, b in itertools.pairwise(bounds)
    ]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cuts", [[20], [7, 30], [0, 10, 10, 52], [1, 2, 3, 40, 50]])  # incl. empty shards
def test_merged_shards_equal_unsplit_and_float64_reference(cuts, causal):
    q, k, scale = _inputs()
    ref = attention_entropy(q, k, softmax_scale=scale, causal=causal, backend="reference")
    whole = attention_entropy(q, k, softmax_scale=scale, causal=causal, backend="torch_chunked")
    merged = entropy_from_state(functools.reduce(merge_states, _shards(q, k, scale, cuts, causal=causal)))
    torch.testing.assert_close(merged, whole, atol=2e-5, rtol=0)
    torch.testing.assert_close(merged, ref, atol=2e-5, rtol=0)


@pytest.mark.parametrize("window", [1, 6, 25])
def test_sliding_window_shards_merge_to_the_unsplit_window(window):
    """A shard's window is global too: shards wholly behind a row's window are its identity."""
    q, k, scale = _inputs(seed=5)
    ref = attention_entropy(q, k, softmax_scale=scale, window=window, backend="reference")
    merged = entropy_from_state(
        functools.reduce(merge_states, _shards(q, k, scale, [4, 19, 30], window=window))
    )
    torch.testing.assert_close(merged, ref, atol=2e-5, rtol=0)


def test_merge_is_associative_and_commutative():
    """Every order of four shards, folded left and as a balanced tree, gives the same state."""
    q, k, scale = _inputs(seed=3)
    shards = _shards(q, k, scale, [9, 15, 31])
    first = functools.reduce(merge_states, shards)
    for a, b, c, d in itertools.permutations(shards):
        left_fold = functools.reduce(merge_states, (a, b, c, d))
        balanced = merge_states(merge_states(a, b), merge_states(c, d))
        for state in (left_fold, balanced):
            assert state.keys() == first.keys()
            for key in first:
                torch.testing.assert_close(state[key], first[key], atol=1e-5, rtol=1e-5)
    h = entropy_from_state(first)
    assert torch.isfinite(h).all() and (h >= 0).all()
    torch.testing.assert_close(
        h, attention_entropy(q, k, softmax_scale=scale, backend="reference"), atol=2e-5, rtol=0
    )


def _merge_tree(states, order, splits):
    """Merge `states` taken in `order`, grouped as a binary tree whose split points come from `splits`."""
    if len(order) == 1:
        return states[order[0]]
    cut = 1 + splits[0] % (len(order) - 1)
    left, right = _merge_tree(states, order[:cut], splits[1:]), _merge_tree(states, order[cut:], splits[1:])
    return merge_states(left, right)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([(2, 2), (4, 2), (6, 1)]), st.integers(1, 20), st.integers(0, 12), st.data())
def test_any_cuts_order_and_grouping_give_the_float64_entropy(heads, T, extra, data):
    Hq, Hkv = heads
    S = T + extra
    q, k, scale = _inputs(B=1, Hq=Hq, Hkv=Hkv, T=T, S=S, seed=data.draw(st.integers(0, 2**16)))
    cuts = sorted(data.draw(st.lists(st.integers(0, S), max_size=5)))  # repeats and 0/S: empty shards
    causal = data.draw(st.booleans())
    states = _shards(q, k, scale, cuts, causal=causal)
    order = data.draw(st.permutations(range(len(states))))
    splits = data.draw(st.lists(st.integers(0, 100), min_size=len(states), max_size=len(states)))
    merged = entropy_from_state(_merge_tree(states, order, splits))
    ref = attention_entropy(q, k, softmax_scale=scale, causal=causal, backend="reference")
    torch.testing.assert_close(merged, ref, atol=2e-5, rtol=0)


def test_empty_and_fully_masked_shards_are_the_identity():
    q, k, scale = _inputs(T=12, S=12)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[:, 4:8] = False  # the middle shard sees no key at all
    shards = _shards(q, k, scale, [4, 8], mask=mask)
    empty = shards[1]
    assert torch.isinf(empty["m"]).all() and (empty["l"] == 0).all() and (empty["u"] == 0).all()
    merged = entropy_from_state(merge_states(merge_states(shards[0], shards[1]), shards[2]))
    ref = attention_entropy(q, k, softmax_scale=scale, mask=mask, backend="reference")
    torch.testing.assert_close(merged, ref, atol=2e-5, rtol=0)
    # the first query row sees only key 0: its later shards are causally empty
    assert torch.isinf(shards[2]["m"][:, :, 0]).all()


def test_peaked_rows_merge_without_cancellation():
    q, k, _ = _inputs(T=20, S=20, seed=5)
    big = torch.full((6,), 40.0)  # near one-hot rows: H ~ 0, where log l − u/l must not cancel badly
    merged = entropy_from_state(functools.reduce(merge_states, _shards(q, k, big, [5, 13])))
    ref = attention_entropy(q, k, softmax_scale=big, backend="reference")
    torch.testing.assert_close(merged, ref, atol=1e-4, rtol=0)
