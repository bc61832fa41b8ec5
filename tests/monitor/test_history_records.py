"""`mon.history` is what the README's words say it is, a sequence of recorded steps (issue 61):
`len(history)`, `history[i]` one step's Record (its step number and each statistic's (layers, heads)
values), slices and iteration, beside the arrays (`steps`, `values[stat]`) and `at(step)` it had."""

import numpy as np
import pytest

from entropy_lens.monitor import History, load_history
from entropy_lens.monitor.history import Record


def _history() -> History:
    rng = np.random.default_rng(0)
    values = {s: rng.random((3, 2, 4)).astype(np.float32) for s in ("entropy", "max_logit")}
    return History(
        steps=np.array([10, 20, 30]),
        forwards=np.array([1, 2, 1]),
        rows=np.array([64, 128, 64]),
        values=values,
        meta={"stats": ["entropy", "max_logit"], "n_layers": 2, "n_heads": 4},
        sequences=np.array([2, 4, 2]),
    )


def test_a_history_is_a_sequence_of_records():
    history = _history()
    assert len(history) == 3
    first = history[0]
    assert isinstance(first, Record) and first.step == 10 and (first.forwards, first.rows) == (1, 64)
    assert first.sequences == 2 and set(first.values) == {"entropy", "max_logit"}
    assert first.values["max_logit"].shape == (2, 4)
    np.testing.assert_array_equal(first.values["entropy"], history.values["entropy"][0])
    assert history[-1].step == 30 and history[np.int64(1)].step == 20
    assert [r.step for r in history] == history.steps.tolist() == [10, 20, 30]
    assert [r.step for r in history[1:]] == [20, 30] and history[5:] == []
    for record in history:  # each record is the arrays' row, and at(step)'s values
        at = history.at(record.step)
        assert all(np.array_equal(record.values[s], at[s]) for s in at)


def test_a_position_out_of_range_or_a_non_integer_is_refused_in_one_line():
    history = _history()
    with pytest.raises(IndexError, match="record 3 of a history of 3 records"):
        history[3]
    with pytest.raises(IndexError):
        history[-4]
    for bad in (1.0, "10", True):
        with pytest.raises(TypeError, match=r"history\.at\(step\)"):
            history[bad]
    assert list(History(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), {})) == []


def test_a_saved_history_reads_back_as_the_same_records(tmp_path):
    history = _history()
    back = load_history(history.save(tmp_path / "h.npz"))
    assert [r.step for r in back] == [10, 20, 30] and back[1].rows == 128
    assert np.array_equal(back[-1].values["entropy"], history[-1].values["entropy"])
