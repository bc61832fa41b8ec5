"""max_logit's summaries are maxima (issue 50): its declaration (`Statistic.reduction` MAX) makes the
per-head statistics (`analysis.head_statistics`, the view's heat map) and the scan's printed summary
(`results.summary`) take the maximum over positions, never the mean; the other statistics keep the mean."""

from __future__ import annotations

import numpy as np
import pytest
from view_inputs import planted

from entropy_lens.analysis import head_statistics
from entropy_lens.results import ScanResult, spans_by_l, summary
from entropy_lens.statistics import MAX_LOGIT, STATISTICS

T, L = 256, 64


@pytest.fixture
def saved(tmp_path) -> ScanResult:
    """A results file whose max_logit rows are known: a slow drift with one spike per head inside the last
    span [3L, 4L) and another in [L, 2L), so that each span's maximum is far from its mean."""
    result = planted(T=T, L=L)
    i = np.arange(T, dtype=np.float64)
    h = np.arange(6, dtype=np.float64).reshape(2, 3, 1)
    logits = 2.0 + h + 0.001 * i + 0 * h
    logits[:, :, 3 * L + 7] += 5.0 + h[:, :, 0]  # the last span's maximum, per head
    logits[:, :, L + 3] += 3.0
    result.stats["max_logit"] = logits.astype(np.float32)  # squared=False: no max_logit_sq
    result.meta["stats"] = {"entropy": "nats", "max_logit": MAX_LOGIT.unit}
    result.meta["schema_version"] = 2
    result.save(tmp_path / "r.npz")
    return ScanResult.load(tmp_path / "r.npz")


def test_the_declaration_names_max_logit_a_maximum():
    assert STATISTICS["max_logit"].reduction.name == "max"
    assert {s.reduction.name for name, s in STATISTICS.items() if name != "max_logit"} == {"mean"}


def test_head_statistics_of_max_logit_are_maxima_over_positions(saved):
    y = saved.stat("max_logit").astype(np.float64)
    stats = head_statistics(saved, stat="max_logit")
    spans = spans_by_l(T, L)
    a, b = list(spans.values())[-1]
    np.testing.assert_array_equal(stats.values["converged"], y[:, :, a:b].max(axis=2))
    assert not np.allclose(stats.values["converged"], y[:, :, a:b].mean(axis=2))  # the old summary
    for label, (a, b) in spans.items():
        np.testing.assert_array_equal(stats.values[f"span {label}"], y[:, :, a:b].max(axis=2))
    np.testing.assert_array_equal(
        stats.values["growth"], y[:, :, L : 2 * L].max(axis=2) - y[:, :, L // 2 : L].max(axis=2)
    )
    assert "max over positions" in stats.descriptions["converged"]
    assert "max over positions" in stats.descriptions["growth"]
    assert all("max over positions" in stats.descriptions[f"span {label}"] for label in spans)
    # entropy (a mean statistic) as before
    entropy = head_statistics(saved)
    np.testing.assert_allclose(
        entropy.values["converged"], saved.entropy[:, :, a:b].astype(np.float64).mean(axis=2) / np.log(2)
    )
    assert "mean over the last span" in entropy.descriptions["converged"]
    # the span named after a comma, with its positions, not run on ("the last span last tenth", issue 70)
    last, (a, b) = list(spans.items())[-1]
    assert f"over the last span, {last} (positions [{a}, {b})), bits" in entropy.descriptions["converged"]


def test_the_scan_summary_prints_max_logits_maximum(saved):
    text = summary(saved)
    block = text.split("\n\n")[1].splitlines()
    assert block[0].split()[-1] == "max_logit" and block[1].split() == [MAX_LOGIT.unit]
    y = saved.stat("max_logit")
    spans = spans_by_l(T, L)
    rows = block[2 : 2 + len(spans)]
    for row, (a, b) in zip(rows, spans.values()):
        assert float(row.split()[-1]) == pytest.approx(y[:, :, a:b].max(), abs=5e-4)
    assert float(rows[-1].split()[-1]) != pytest.approx(y[:, :, 3 * L :].mean(), abs=0.1)  # not the mean
    assert "max_logit: max over positions and heads" in block[2 + len(spans)]
    assert "max over positions" not in summary(planted(T=T, L=L))  # nothing to say without a maximum
