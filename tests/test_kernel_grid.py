"""The kernels' grids (tests/kernel_grid.py) run an all-pairs cover by default and every point under
ENTROPY_LENS_TEST_GRID=full (`make test-full`): a cover meets every value of every axis and every pair
of values the full grid has, on the grid of the statistics with the score modifiers a call really gets."""

import itertools
import re
from pathlib import Path

import pytest
from kernel_grid import (
    AXES,
    GRID_VARIABLE,
    all_pairs,
    cover,
    cover_of,
    grid_features,
    grid_kind,
    on_the_grid,
)

COLUMNS = [list(v.values()) if isinstance(v, dict) else v for v in AXES.values()]


def _met(points, features=lambda *point: point) -> set:
    """Every (axis, value, axis, value) pair the points `points` meet, on their `features`."""
    met = set()
    for point in points:
        f = features(*point)
        met |= {(a, f[a], b, f[b]) for a, b in itertools.combinations(range(len(f)), 2)}
    return met


def test_the_cover_meets_every_pair_of_the_full_grid():
    full = cover(*COLUMNS, features=grid_features, kind="full")
    pairs = cover(*COLUMNS, features=grid_features, kind="pairs")
    assert full == list(itertools.product(*COLUMNS))
    assert set(pairs) <= set(full) and len(pairs) < len(full)
    # pairs of what the kernels see, hence every value of every axis
    assert _met(pairs, grid_features) == _met(full, grid_features)
    # the softcap alone (the window's case without causal) is a value of its own, met with every head layout
    softcap_alone = {f[0] for f in (grid_features(*p) for p in pairs) if f[-1] == ("softcap",)}
    assert softcap_alone == set(COLUMNS[0])


def test_all_pairs_on_axes_of_its_own():
    """Three two-valued axes: four points meet their twelve pairs (the least: two axes have four pairs);
    a point that adds no pair is never taken."""
    features = tuple(itertools.product((0, 1), repeat=3))
    found = [features[i] for i in all_pairs(features)]
    assert len(found) == 4
    for a, b in itertools.combinations(range(3), 2):
        assert {(f[a], f[b]) for f in found} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    twice = ((0, 0), (0, 0), (1, 1))
    assert [twice[i] for i in all_pairs(twice)] == [(0, 0), (1, 1)]
    uneven = cover([1, 2], "abc", [True, False], [None, 0.5], kind="pairs")
    assert _met(uneven) == _met(itertools.product([1, 2], "abc", [True, False], [None, 0.5]))
    assert len(uneven) == 6  # 2 x 3, the largest pair of axes


def test_a_cover_of_given_points_meets_the_pairs_they_have():
    """A grid whose configs depend on its dtype (as the autotuner's do): the cover meets every pair the
    points have, with each config counted with its dtype where the features say so, and asks no pair
    that no point has."""
    configs = {"bf16": [(64, 4), (128, 8)], "fp32": [(32, 4), (64, 4), (16, 2)]}
    points = [(a, d, w, c) for a in (80, 90) for d in configs for w in (False, True) for c in configs[d]]

    def tagged(a, d, w, c):
        return a, d, w, (d, c)

    found = cover_of(points, features=tagged, kind="pairs")
    assert set(found) <= set(points) and len(found) < len(points)
    assert _met(found, tagged) == _met(points, tagged)
    assert {(a, d, c) for a, d, _, c in found} == {(a, d, c) for a, d, _, c in points}  # config x arch
    assert cover_of(points, kind="full") == points


@pytest.mark.parametrize("kind", ["pairs", "full"])
def test_the_variable_picks_the_points(kind, monkeypatch):
    monkeypatch.setenv(GRID_VARIABLE, kind)
    assert grid_kind() == kind

    @on_the_grid
    def test(Hq, Hkv, T, S, mask_kind, causal, case):
        pass

    (mark,) = test.pytestmark
    assert mark.args[0] == "Hq,Hkv,T,S,mask_kind,causal,case"
    want = cover(*COLUMNS, features=grid_features, kind=kind)
    assert [tuple(p.values) for p in mark.args[1]] == [(*h, *ts, m, c, case) for h, ts, m, c, case in want]
    assert mark.args[1][0].id.count("-") == 4  # an id per axis


def test_an_unknown_grid_is_refused(monkeypatch):
    monkeypatch.setenv(GRID_VARIABLE, "fulll")
    with pytest.raises(ValueError, match="use pairs .* or full"):
        grid_kind()
    monkeypatch.delenv(GRID_VARIABLE)
    assert grid_kind() == "pairs"


def test_make_test_full_is_the_same_suite_over_every_point():
    """`make test` runs the covers, `make test-full` the same command over the full products; the README
    names both, and CI runs the README's test command (`make test`)."""
    root = Path(__file__).parents[1]
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    recipe = dict(re.findall(r"^(test|test-full):.*\n\t(.+)$", makefile, flags=re.MULTILINE))
    assert recipe == {"test": "$(SUITE)", "test-full": f"{GRID_VARIABLE}=full $(SUITE)"}
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "make test " in readme and "`make test-full`" in readme
    assert (root / ".ci" / "run").read_text(encoding="utf-8").splitlines()[-1] == "make test"
