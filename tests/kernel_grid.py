"""The grid the row statistics (tests/kernels/test_stats.py) and the key statistics (test_received.py) are
both held to their float64 definitions over, written once: the head layouts, the lengths, the masks,
causal or not, and the score modifiers (`MOD_CASES`), with the tolerance both use.

    @on_the_grid                         # parametrises Hq, Hkv, T, S, mask_kind, causal, case
    @pytest.mark.parametrize("kernel", ...)
    def test_...(kernel, Hq, Hkv, T, S, mask_kind, causal, case):
        kw = grid_kwargs(case, B, Hq, T, S, mask_kind, causal)   # the keywords every kernel takes
        ...
        assert_close_relative(got, want)

The builders it uses (`make_sinks`, `make_slopes`, `mask_kinds`) are tests/kernel_cases.py's.

Which points of a grid run, here and in the other kernels' grids (`over_the_cover`, `cover`): by default
an all-pairs cover (`all_pairs`: every value of every axis, and every pair of values of any two axes,
meets at least one point), so a failure that needs two settings together (GQA with a 4-D mask, T > S with
a window) is still met; `make test-full` sets ENTROPY_LENS_TEST_GRID=full and runs every grid's full
Cartesian product.
"""

from __future__ import annotations

import functools
import itertools
import os
import random

import pytest
import torch
from kernel_cases import make_sinks, make_slopes, mask_kinds

# the score modifiers of each case; the window applies to causal calls only (a window is causal)
MOD_CASES = {
    "plain": {},
    "sinks": {"sinks": True},
    "softcap+window": {"softcap": 2.5, "window": 5},
    "alibi+sinks": {"alibi": True, "sinks": True},
    "key_bias": {"key_bias": True},
}
GRID_VARIABLE = "ENTROPY_LENS_TEST_GRID"
GRIDS = ("pairs", "full")


def grid_kind() -> str:
    """ENTROPY_LENS_TEST_GRID: "pairs" (the default: the all-pairs cover) or "full" (every point)."""
    kind = os.environ.get(GRID_VARIABLE, "pairs")
    if kind not in GRIDS:
        raise ValueError(f"{GRID_VARIABLE}={kind!r}: use pairs (the default) or full (make test-full)")
    return kind


def modifiers_of(case: str, causal: bool) -> dict:
    """The score modifiers a call of `case` gets: MOD_CASES[case], the window only where causal."""
    return {key: value for key, value in MOD_CASES[case].items() if causal or key != "window"}


def _pairs(features: tuple) -> set:
    """The (axis, value, axis, value) pairs a point of `features` (one value per axis) meets."""
    return {(a, features[a], b, features[b]) for a, b in itertools.combinations(range(len(features)), 2)}


def _greedy_cover(pair_sets: list[set], seed: int) -> list[int]:
    """Indices of points that together meet every pair any point meets: each time the first point, in
    `seed`'s order, that meets the most pairs not yet met."""
    order = list(range(len(pair_sets)))
    random.Random(seed).shuffle(order)
    unmet = set().union(*pair_sets)
    chosen = []
    while unmet:
        best = max(order, key=lambda i: len(pair_sets[i] & unmet))
        chosen.append(best)
        unmet -= pair_sets[best]
    return chosen


@functools.cache
def all_pairs(features: tuple[tuple, ...], tries: int = 32) -> list[int]:
    """An all-pairs cover of the points `features` (each a tuple of one value per axis): the indices of
    points such that every pair of values of two axes that any point has, one of them has. The smallest
    of greedy covers in `tries` seeded orders, stopping at the first that reaches the least any cover can
    have (the most pairs two axes have: each needs a point of its own). Deterministic."""
    pair_sets = [_pairs(f) for f in features]
    every = set().union(*pair_sets)
    least = max(
        len({(x, y) for a_, x, b_, y in every if (a_, b_) == (a, b)})
        for a, b in itertools.combinations(range(len(features[0])), 2)
    )
    best = None
    for seed in range(tries):
        cover = _greedy_cover(pair_sets, seed)
        if best is None or len(cover) < len(best):
            best = cover
        if len(best) == least:
            break
    return sorted(best)


def cover(*axes, features=None, kind: str | None = None) -> list[tuple]:
    """The points of the product of `axes` (each a sequence of hashable values) that run: every point
    where `kind` (default: ENTROPY_LENS_TEST_GRID) is "full", else an all-pairs cover, of the points'
    values or of `features(*point)` (what a point is where two values may mean one thing)."""
    return cover_of(list(itertools.product(*axes)), features=features, kind=kind)


def cover_of(points: list[tuple], *, features=None, kind: str | None = None) -> list[tuple]:
    """`cover` of a grid given as its points (a product with its impossible points left out, or axes
    whose values depend on others'): the pairs to meet are those the points have."""
    if (kind or grid_kind()) == "full":
        return points
    return [points[i] for i in all_pairs(tuple(features(*p) if features else p for p in points))]


def over_the_cover(axes: dict, *, features=None):
    """`pytest.mark.parametrize` over the `cover` of `axes`: {argument names: values}, the values a list
    (ids their str) or a dict {id: value}; a value of "T,S" is a pair of arguments. `features` takes the
    axes' values of a point, in order."""
    names = list(axes)
    columns = [
        list(v.items()) if isinstance(v, dict) else [(str(value), value) for value in v]
        for v in axes.values()
    ]

    def what(*point):
        return features(*(value for _, value in point)) if features else tuple(i for i, _ in point)

    params = []
    for point in cover(*columns, features=what):
        values = []
        for name, (_, value) in zip(names, point):
            values.extend(value if "," in name else [value])
        params.append(pytest.param(*values, id="-".join(i for i, _ in point)))
    return pytest.mark.parametrize(",".join(names), params)


# the grid's axes, and what a point of it is: the case's axis names the modifiers a call gets
# (softcap+window without causal is a softcap alone), so the cover pairs what runs, not a case's name
AXES = {
    "Hq,Hkv": {"mha": (4, 4), "gqa": (4, 2), "mqa": (6, 1)},
    "T,S": {"square": (21, 21), "T<S": (9, 30), "T>S": (14, 6)},
    "mask_kind": ["none", "key_padding", "4d_per_head"],
    "causal": {"causal": True, "full": False},
    "case": list(MOD_CASES),
}


def grid_features(heads, lengths, mask_kind, causal, case) -> tuple:
    """What the kernels see at a point of AXES, axis by axis."""
    return heads, lengths, mask_kind, causal, tuple(sorted(modifiers_of(case, causal)))


def on_the_grid(test):
    """`test` parametrised over the grid (Hq, Hkv, T, S, mask_kind, causal, case): its all-pairs cover, or
    every point under ENTROPY_LENS_TEST_GRID=full."""
    return over_the_cover(AXES, features=grid_features)(test)


def mod_kwargs(case: str, B: int, Hq: int, S: int, causal: bool) -> dict:
    """The score modifiers of `case` as keywords of the kernels' entry points."""
    spec = modifiers_of(case, causal)
    kw = {}
    if spec.get("sinks"):
        kw["sinks"] = make_sinks(Hq)
    if "softcap" in spec:
        kw["softcap"] = spec["softcap"]
    if "window" in spec:
        kw["window"] = spec["window"]
    if spec.get("alibi"):
        kw["alibi_slopes"] = make_slopes(Hq, 0.5)
    if spec.get("key_bias"):
        kw["key_bias"] = torch.randn(B, Hq, S, generator=torch.Generator().manual_seed(5))
    return kw


def grid_kwargs(case: str, B: int, Hq: int, T: int, S: int, mask_kind: str, causal: bool) -> dict:
    """One grid point's keywords: its score modifiers, its mask and `causal`."""
    return mod_kwargs(case, B, Hq, S, causal) | {"mask": mask_kinds(B, Hq, T, S)[mask_kind], "causal": causal}


def assert_close_relative(got: dict, want: dict, tol=1e-5):
    """Each of `want`'s statistics in `got`: float32, the same shape, finite, and within `tol` relative to
    max(1, |value|)."""
    for name, values in want.items():
        assert got[name].dtype == torch.float32 and got[name].shape == values.shape, name
        assert torch.isfinite(got[name]).all(), name
        err = ((got[name] - values).abs() / values.abs().clamp_min(1.0)).max().item()
        assert err <= tol, (name, err)
