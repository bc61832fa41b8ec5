"""analysis.retrieval_pattern: a passkey run's retrieval heads (Wu et al.) per KV head, exported as
DuoAttention's pattern folder through results.pattern's one writer, and read back through the loader
entropy_lens.kvpress.DuoAttentionPress checks its pattern with (results.pattern.load_pattern)."""

import json
from pathlib import Path

import numpy as np
import pytest

from entropy_lens.analysis import RetrievalPattern, retrieval_heads, retrieval_pattern
from entropy_lens.errors import EntropyLensError
from entropy_lens.results.pattern import load_pattern, write_pattern

ROOT = Path(__file__).parents[2]
LAYERS, HEADS, KV = 2, 4, 2
# two trials' scores per (layer, query head); KV head k groups query heads 2k and 2k + 1
TRIALS = [
    [[0.0, 0.2, 0.0, 0.0], [0.1, 0.0, 0.0, 0.05]],
    [[0.0, 0.1, 0.0, 0.0], [0.3, 0.0, 0.0, 0.15]],
]


def record(trials=TRIALS, *, kv_heads=KV, length=128):
    cells = [
        {
            "length": length,
            "per_trial": [
                {
                    "correct": True,
                    "entropy": np.ones((LAYERS, HEADS)).tolist(),
                    "needle_mass": np.zeros((LAYERS, HEADS)).tolist(),
                    "retrieval_score": t,
                }
                for t in trials
            ],
        }
    ]
    model = {"n_layers": LAYERS, "n_heads": HEADS}
    if kv_heads is not None:
        model["n_kv_heads"] = kv_heads
    return {"config": {"model": "m"}, "model": model, "results": cells}


def test_each_kv_head_scores_its_groups_best_query_head_and_round_trips(tmp_path):
    pattern = retrieval_pattern(record(), 128, sink_size=4, recent_size=16)
    means = np.mean(np.asarray(TRIALS), axis=0)  # the reference: the trials' mean, then each group's max
    np.testing.assert_allclose(pattern.heads, means)
    np.testing.assert_allclose(pattern.scores, [[0.15, 0.0], [0.2, 0.1]])
    assert (pattern.sink_size, pattern.recent_size, pattern.length, pattern.model) == (4, 16, 128, "m")
    folder = pattern.export(tmp_path / "pattern")
    sink, recent, scores = load_pattern(folder)  # DuoAttentionPress's reader, every field checked
    assert (sink, recent) == (4, 16) and scores.shape == (LAYERS, KV)
    np.testing.assert_allclose(scores, pattern.scores, atol=5e-7)  # written to 6 decimals
    assert json.loads((folder / "config.json").read_text()) == {"sink_size": 4, "recent_size": 16}


def test_the_committed_smollm2_record_exports_a_pattern_of_its_kv_heads(tmp_path):
    """SmolLM2 (30 layers, 9 query heads, 3 KV heads): its record's pattern has the model's KV shape, each
    score the largest of its three query heads' retrieval_heads means, and reads back equal."""
    path = ROOT / "figures" / "runs" / "retrieval-smollm2-1024.json"
    rec = json.loads(path.read_text(encoding="utf-8"))
    heads = retrieval_heads(rec, 1024)
    pattern = retrieval_pattern(rec, 1024, sink_size=64, recent_size=256)
    assert heads.shape == (30, 9) and pattern.scores.shape == (30, 3) and pattern.scores.max() > 0
    for kv in range(3):
        np.testing.assert_array_equal(pattern.scores[:, kv], heads[:, 3 * kv : 3 * kv + 3].max(1))
    sink, recent, scores = load_pattern(pattern.export(tmp_path / "smollm2"))
    assert (sink, recent) == (64, 256)
    np.testing.assert_allclose(scores, pattern.scores, atol=5e-7)


def test_the_kv_heads_come_from_the_record_or_are_refused_in_one_line():
    with pytest.raises(EntropyLensError, match=r"names no n_kv_heads .*pass kv_heads=N") as err:
        retrieval_pattern(record(kv_heads=None), sink_size=4, recent_size=16)
    assert "\n" not in str(err.value)
    older = retrieval_pattern(record(kv_heads=None), sink_size=4, recent_size=16, kv_heads=4)
    np.testing.assert_allclose(older.scores, older.heads)  # one query head per KV head: the scores
    with pytest.raises(EntropyLensError, match=r"kv_heads=4, but the record's model has 2 KV heads"):
        retrieval_pattern(record(), sink_size=4, recent_size=16, kv_heads=4)
    with pytest.raises(EntropyLensError, match=r"4 query heads do not split into 3 KV heads"):
        retrieval_pattern(record(kv_heads=3), sink_size=4, recent_size=16)
    with pytest.raises(EntropyLensError, match=r"no trial of length 256"):
        retrieval_pattern(record(), 256, sink_size=4, recent_size=16)


@pytest.mark.parametrize(
    ("sink", "recent", "message"),
    [
        (-1, 16, r"^sink_size must be at least 0"),
        (True, 16, r"^sink_size must be a whole number"),
        (2.0, 16, r"^sink_size must be a whole number"),
        (4, 0, r"^recent_size must be at least 1"),
    ],
)
def test_a_sink_or_window_the_press_would_refuse_is_refused_before_any_write(tmp_path, sink, recent, message):
    with pytest.raises(EntropyLensError, match=message):
        retrieval_pattern(record(), sink_size=sink, recent_size=recent)
    pattern = RetrievalPattern(np.zeros((2, 2)), np.zeros((2, 4)), sink_size=sink, recent_size=recent)
    with pytest.raises(EntropyLensError, match=message):
        pattern.export(tmp_path / "p")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        ([[0.5, 1.5]], r"layer 0 holds 1.5"),
        ([[0.5], [float("nan")]], r"layer 1 holds nan"),
        ([0.5, 0.5], r"1 dimensions"),
        (np.zeros((0, 2)), r"it is empty"),
    ],
)
def test_the_writer_refuses_scores_the_reader_would_refuse(tmp_path, scores, message):
    with pytest.raises(EntropyLensError, match=message):
        write_pattern(tmp_path / "p", scores, sink_size=4, recent_size=16)
    assert not (tmp_path / "p").exists()


def test_the_reader_refuses_a_hand_edited_pattern_in_one_line(tmp_path):
    folder = write_pattern(tmp_path / "p", [[0.5, 0.25]], sink_size=4, recent_size=16)
    (folder / "full_attention_heads.tsv").write_text("0.5\t1.25\n", encoding="utf-8")
    with pytest.raises(
        EntropyLensError, match=r"needs head scores in \[0, 1\] \(layer 0 holds 1.25\)"
    ) as err:
        load_pattern(folder)
    assert "\n" not in str(err.value) and "retrieval_pattern" in str(err.value)
    (folder / "config.json").write_text('{"sink_size": 4, "recent_size": 0}', encoding="utf-8")
    with pytest.raises(EntropyLensError, match=r"config.json's recent_size must be at least 1"):
        load_pattern(folder)
