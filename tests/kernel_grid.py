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

Which points run: by default an all-pairs cover of the grid (`all_pairs`: every value of every axis, and
every pair of values of any two axes, meets at least one point), so a failure that needs two settings
together (GQA with a 4-D mask, T > S with a window) is still met; `make test-full` sets
ENTROPY_LENS_TEST_GRID=full and runs the full Cartesian product.
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

# the axes, each (argument names, values, ids): a value of "Hq,Hkv" or "T,S" is a pair of arguments
AXES = (
    ("Hq,Hkv", [(4, 4), (4, 2), (6, 1)], ["mha", "gqa", "mqa"]),
    ("T,S", [(21, 21), (9, 30), (14, 6)], ["square", "T<S", "T>S"]),
    ("mask_kind", ["none", "key_padding", "4d_per_head"], ["none", "key_padding", "4d_per_head"]),
    ("causal", [True, False], ["causal", "full"]),
    ("case", list(MOD_CASES), list(MOD_CASES)),
)
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


def grid_features(point: tuple[int, ...]) -> tuple:
    """What the kernels see at `point` (one value index per axis of AXES), axis by axis: the case's
    axis names the modifiers a call gets (softcap+window without causal is a softcap alone), so the cover
    pairs what runs, not what the case is called."""
    values = [axis_values[i] for (_, axis_values, _), i in zip(AXES, point)]
    *_, causal, case = values
    return (*values[:-1], tuple(sorted(modifiers_of(case, causal))))


def grid_points(kind: str) -> list[tuple[int, ...]]:
    """The grid's points of `kind` ("pairs": the all-pairs cover; "full": every point) as value indices
    per axis of AXES."""
    product = list(itertools.product(*(range(len(values)) for _, values, _ in AXES)))
    if kind == "full":
        return product
    return [product[i] for i in all_pairs(tuple(map(grid_features, product)))]


def _param(point: tuple[int, ...]):
    values, ids = [], []
    for (names, axis_values, axis_ids), i in zip(AXES, point):
        value = axis_values[i]
        values.extend(value if "," in names else [value])
        ids.append(axis_ids[i])
    return pytest.param(*values, id="-".join(ids))


def on_the_grid(test):
    """`test` parametrised over the grid (Hq, Hkv, T, S, mask_kind, causal, case): its all-pairs cover, or
    every point under ENTROPY_LENS_TEST_GRID=full."""
    names = ",".join(names for names, _, _ in AXES)
    return pytest.mark.parametrize(names, [_param(point) for point in grid_points(grid_kind())])(test)


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
