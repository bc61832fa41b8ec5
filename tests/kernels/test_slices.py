"""row_slice_stats: span_mass, offset_prob, top_key and distance_mass at every row, equal to their float64
definitions (`slices_reference` on the materialised probabilities) on every CPU backend over the kernels' grid,
with tiles small enough that every row block, span and key range spans several; the definitions held by
hand; every parameter refused in one line. span_mass comes from the row pass where its backend sums key
ranges (torch_chunked, native): that pass held to the float64 mass of each range on its own too."""

import pytest
import torch
from kernel_cases import make_inputs
from kernel_grid import grid_kwargs, on_the_grid
from tolerances import sum_tolerance

from entropy_lens import row_slice_stats
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure, Stats
from entropy_lens.kernels import ScoreMods, attention_probabilities, slices
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.native import native_available
from entropy_lens.kernels.plan import run
from entropy_lens.kernels.reference import attention_scores
from entropy_lens.statistics.slices import Slices

KERNELS = ["torch_chunked", *(["native"] if native_available() else [])]
ALL = ("span_mass", "offset_prob", "top_key", "distance_mass")


def _want(q, k, kw, rows, **asked):
    """The float64 definitions of rows a..b, at real positions counted from each batch row's first real key."""
    mods = ScoreMods.build(q, k, **kw)
    scale = validate_scale(q, k, 0.4)
    p, _, _ = attention_probabilities(q, k, scale, mods)
    _, visible = attention_scores(q, k, scale, mods)
    a, b = rows
    sight = slices.Sight.of(mods, q.shape[2], k.shape[2], a, b)
    asked = Slices.parse(ALL, **asked)
    return slices.slices_reference(p[:, :, a:b], visible[:, :, a:b], sight, asked)


@on_the_grid
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_row_equals_the_float64_definitions(
    kernel, Hq, Hkv, T, S, mask_kind, causal, case, monkeypatch
):
    monkeypatch.setattr(slices, "BLOCK_Q", 4)  # several row blocks, key tiles and merges of the top keys
    monkeypatch.setattr(slices, "BLOCK_K", 5)
    B = 2
    q, k = make_inputs(B, Hq, Hkv, T, S, 8)
    kw = grid_kwargs(case, B, Hq, T, S, mask_kind, causal)
    if kw.get("window") is not None and not causal:
        kw.pop("window")
    asked = {"spans": {"head": (0, 3), "middle": (S // 3, S - S // 4), "all": (0, S)}, "offsets": (0, 1, 4)}
    asked["top_keys"] = 3
    asked["distance_bins"] = (0, 1, 3, max(4, S // 2))
    rows = (T // 3, T)
    got = row_slice_stats(q, k, softmax_scale=0.4, stats=ALL, rows=rows, backend=kernel, **asked, **kw)
    want = _want(q, k, kw, rows, **asked)
    R = rows[1] - rows[0]
    # a probability is e^(s − lse): s a D-term float32 dot product, lse a sum over S keys; a span's mass a
    # sum of at most S of them (tests/tolerances.py)
    keys_per_head = k.double().repeat_interleave(Hq // Hkv, dim=1)
    largest = 0.4 * (q.double() @ keys_per_head.transpose(-1, -2)).abs().max().item()
    tol = sum_tolerance(2 * S + q.shape[-1]) * (1 + largest)
    for name, n in (("span_mass", 3), ("offset_prob", 3), ("top_key_prob", 3), ("distance_mass", 4)):
        assert got[name].dtype == torch.float32 and got[name].shape == (B, Hq, R, n), name
        assert (got[name].double() - want[name]).abs().max().item() <= tol, (name, kernel, case)
    assert got["top_key"].dtype == torch.int64
    # the positions agree wherever the definition's ranks are apart by more than the tolerance (a near tie
    # in float64 may order otherwise in float32); −1 exactly where the definition has no key
    p = want["top_key_prob"]
    apart = torch.ones_like(p, dtype=torch.bool)
    apart[..., 1:] &= (p[..., 1:] - p[..., :-1]).abs() > 2 * tol
    apart[..., :-1] &= (p[..., :-1] - p[..., 1:]).abs() > 2 * tol
    assert torch.equal(got["top_key"] == -1, want["top_key"] == -1), (kernel, case)
    assert torch.equal(got["top_key"][apart], want["top_key"][apart]), (kernel, case)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("window, sinks", [(None, False), (6, True)], ids=["causal", "window-sink"])
def test_the_row_pass_sums_each_key_range_as_the_definition(kernel, window, sinks):
    """The row pass's span masses (`run`'s spans) equal each key range's float64 mass: a decode step's 3
    rows at the end of 13 keys, left padding (0 and 4 pad keys), GQA, tiles of 2 rows × 3 keys (each range
    over several, rescaled as the max grows), ranges inside, across the padding, empty, reversed and past
    the keys; with a window and a sink (its share in no range)."""
    B, Hq, Hkv, T, S = 2, 4, 2, 3, 13
    q, k = make_inputs(B, Hq, Hkv, T, S, 8)
    keep = torch.arange(S)[None] >= torch.tensor([0, 4])[:, None]
    kw = {"mask": keep, "window": window, "sinks": torch.linspace(-1, 1, Hq) if sinks else None}
    mods = ScoreMods.build(q, k, **kw)
    scale = validate_scale(q, k, 0.4)
    ranges = torch.tensor(
        [[[0, 3], [2, S], [5, 5], [S, S + 4], [-3, 2]], [[4, 7], [6, S], [9, 8], [0, S], [11, 40]]]
    )  # (B, n, 2): [lo, hi) per batch row
    row = run(
        kernel,
        q,
        k,
        None,
        scale,
        mods,
        measure=Measure().replace(stats=Stats()),
        block_q=2,
        block_k=3,
        spans=ranges,
    )
    p, _, _ = attention_probabilities(q, k, scale, mods)
    want = torch.stack(
        [
            torch.stack([p[b, ..., max(lo, 0) : max(hi, 0)].sum(-1) for lo, hi in ranges[b].tolist()], -1)
            for b in range(B)
        ]
    )
    largest = 0.4 * (q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)).abs().max().item()
    tol = sum_tolerance(2 * S + q.shape[-1]) * (1 + largest)  # as the grid's: D-term scores, S-term sums
    assert row.spans.dtype == torch.float32 and row.spans.shape == (B, Hq, T, 5)
    assert (row.spans.double() - want).abs().max().item() <= tol, kernel
    assert row.spans[0, ..., 2:4].abs().max() == 0 and row.spans[1, ..., 2].abs().max() == 0  # empty ranges


def test_a_generations_spans_are_key_ranges_from_each_rows_first_real_key():
    """span_ranges: "prompt" [0, P), "generated" [P, ∞) and the caller's spans, in real positions, move
    by each batch row's first real key and are clamped to the S keys."""
    S = 12
    keep = torch.arange(S)[None] >= torch.tensor([0, 3])[:, None]
    mods = ScoreMods.build(*make_inputs(2, 2, 2, 1, S, 8), mask=keep)
    asked = Slices.parse(("span_mass",), per_token=True, spans={"doc": (1, 10)})
    got = slices.span_ranges(mods, asked, S, prompt_len=torch.tensor([5, 4]))
    assert got.tolist() == [[[0, 5], [5, 12], [1, 10]], [[3, 7], [7, 12], [4, 12]]]
    assert slices.span_ranges(mods, Slices.parse(("top_key",)), S) is None


def test_the_definitions_by_hand():
    # one head, four keys: row i's scores make its probabilities known
    q = torch.zeros(1, 1, 4, 2)
    k = torch.zeros(1, 1, 4, 2)
    q[0, 0, 3] = torch.tensor([1.0, 0.0])
    k[0, 0, :, 0] = torch.tensor([2.0, 0.0, 2.0, 0.0])  # row 3: keys 0 and 2 tie, above keys 1 and 3
    got = row_slice_stats(
        q,
        k,
        softmax_scale=1.0,
        stats=ALL,
        spans={"first_two": (0, 2)},
        offsets=(0, 1, 3),
        top_keys=3,
        distance_bins=(0, 1, 3),
    )
    e = torch.tensor([2.0, 0.0, 2.0, 0.0]).exp()
    p3 = e / e.sum()
    assert torch.allclose(got["span_mass"][0, 0, :, 0], torch.tensor([1.0, 1.0, 2 / 3, p3[:2].sum()]))
    # own key, previous key, 3 behind: rows 0..3 see 1..4 keys uniformly except row 3
    want_offsets = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 0], [p3[3], p3[2], p3[0]]])
    assert torch.allclose(got["offset_prob"][0, 0], want_offsets)
    # ties: the earliest key first; past the keys a row sees: −1 and 0
    assert got["top_key"][0, 0].tolist() == [[0, -1, -1], [0, 1, -1], [0, 1, 2], [0, 2, 1]]
    assert torch.allclose(got["top_key_prob"][0, 0, 3], torch.stack([p3[0], p3[2], p3[1]]))
    assert got["top_key_prob"][0, 0, 0].tolist()[1:] == [0.0, 0.0]
    # distance bins [0, 1), [1, 3), [3, ∞): row 3's own key, keys 2 and 1, key 0
    want_bins = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [1 / 3, 2 / 3, 0], [p3[3], p3[1] + p3[2], p3[0]]])
    assert torch.allclose(got["distance_mass"][0, 0], want_bins)
    reference = row_slice_stats(
        q,
        k,
        softmax_scale=1.0,
        stats=ALL,
        spans={"first_two": (0, 2)},
        offsets=(0, 1, 3),
        top_keys=3,
        distance_bins=(0, 1, 3),
        backend="reference",
    )
    assert torch.equal(reference["top_key"], got["top_key"])


def test_a_decode_row_counts_its_keys_from_the_cache():
    # T = 1 row at the end of S = 7 keys: its own key is 6, the key one behind 5
    q, k = make_inputs(1, 2, 1, 1, 7, 8)
    got = row_slice_stats(q, k, softmax_scale=0.5, stats="offset_prob,top_key", offsets=(0, 1), top_keys=7)
    assert sorted(got["top_key"][0, 0, 0].tolist()) == list(range(7))  # every key ranked once
    p = torch.zeros(1, 2, 7).scatter(-1, got["top_key"][..., 0, :], got["top_key_prob"][..., 0, :])
    assert torch.allclose(got["offset_prob"][..., 0, :], p[..., [6, 5]])
    assert torch.allclose(got["top_key_prob"].sum(-1), torch.ones(1, 2, 1))


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"stats": "entropy"}, "choose from span_mass"),
        ({"stats": "span_mass"}, "span_mass needs spans="),
        ({"stats": "offset_prob"}, "offset_prob needs offsets="),
        ({"stats": "top_key", "offsets": (1,)}, "offsets= is read by the statistic offset_prob"),
        ({"stats": "top_key", "top_keys": 0}, "top_keys"),
        ({"stats": "offset_prob", "offsets": (1, 1)}, "twice"),
        ({"stats": "offset_prob", "offsets": (-1,)}, "at least 0"),
        ({"stats": "span_mass", "spans": {"x": (3, 3)}}, "is empty"),
        ({"stats": "span_mass", "spans": {"x": (0, 9)}}, "at most 6"),
        ({"stats": "top_key", "rows": (0, 7)}, "at most 6"),
        ({"stats": "distance_mass"}, "distance_mass needs distance_bins="),
        ({"stats": "distance_mass", "distance_bins": (1, 4)}, "increasing edges from 0"),
        ({"stats": "distance_mass", "distance_bins": (0, 4, 4)}, "increasing edges from 0"),
        (
            {"stats": "top_key", "distance_bins": (0, 4)},
            "distance_bins= is read by the statistic distance_mass",
        ),
    ],
)
def test_each_parameter_is_refused_in_one_line(kw, match):
    q, k = make_inputs(1, 2, 2, 6, 6, 8)
    with pytest.raises(EntropyLensError, match=match):
        row_slice_stats(q, k, softmax_scale=0.3, **kw)


def test_an_unknown_argument_is_an_error():
    q, k = make_inputs(1, 2, 2, 6, 6, 8)
    with pytest.raises(TypeError, match="unexpected keyword"):
        row_slice_stats(q, k, softmax_scale=0.3, stats="top_key", top_key=2)
