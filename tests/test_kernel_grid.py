"""The kernels' grid (tests/kernel_grid.py) runs an all-pairs cover by default and every point under
ENTROPY_LENS_TEST_GRID=full (`make test-full`): the cover meets every value of every axis and every pair
of values the full grid has, with the score modifiers a call really gets."""

import itertools

import pytest
from kernel_grid import AXES, GRID_VARIABLE, all_pairs, grid_features, grid_kind, grid_points, on_the_grid


def _met(points) -> set:
    """Every (axis, value, axis, value) pair the grid points `points` meet, on what the kernels see."""
    met = set()
    for point in points:
        features = grid_features(point)
        met |= {(a, features[a], b, features[b]) for a, b in itertools.combinations(range(len(AXES)), 2)}
    return met


def test_the_cover_meets_every_pair_of_the_full_grid():
    full, pairs = grid_points("full"), grid_points("pairs")
    assert len(full) == len(set(full)) == len(list(itertools.product(*(values for _, values, _ in AXES))))
    assert set(pairs) <= set(full) and len(pairs) < len(full)
    assert _met(pairs) == _met(full)  # pairs of values, hence every value of every axis
    # the softcap alone (the window's case without causal) is a value of its own, met with every other axis
    softcap_alone = {f for f in map(grid_features, pairs) if f[-1] == ("softcap",)}
    assert {f[0] for f in softcap_alone} == {v for v in AXES[0][1]}


def test_all_pairs_on_axes_of_its_own():
    """Three two-valued axes: four points meet their twelve pairs (the least: two axes have four pairs);
    a point that adds no pair is never taken."""
    features = tuple(itertools.product((0, 1), repeat=3))
    cover = [features[i] for i in all_pairs(features)]
    assert len(cover) == 4
    for a, b in itertools.combinations(range(3), 2):
        assert {(f[a], f[b]) for f in cover} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    twice = ((0, 0), (0, 0), (1, 1))
    assert [twice[i] for i in all_pairs(twice)] == [(0, 0), (1, 1)]


@pytest.mark.parametrize("kind", ["pairs", "full"])
def test_the_variable_picks_the_points(kind, monkeypatch):
    monkeypatch.setenv(GRID_VARIABLE, kind)
    assert grid_kind() == kind

    @on_the_grid
    def test(Hq, Hkv, T, S, mask_kind, causal, case):
        pass

    (mark,) = test.pytestmark
    assert mark.args[0] == "Hq,Hkv,T,S,mask_kind,causal,case"
    assert len(mark.args[1]) == len(grid_points(kind)) and all(len(p.values) == 7 for p in mark.args[1])


def test_an_unknown_grid_is_refused(monkeypatch):
    monkeypatch.setenv(GRID_VARIABLE, "fulll")
    with pytest.raises(ValueError, match="use pairs .* or full"):
        grid_kind()
    monkeypatch.delenv(GRID_VARIABLE)
    assert grid_kind() == "pairs"
