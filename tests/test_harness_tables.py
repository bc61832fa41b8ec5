"""Tables 1 and 3 from lm-eval results files (analysis/downstream.py, `entropy-lens eval-table`), on
synthetic results files: the metric each column takes, the averages, the paper's LongBench groups, the
label of a run, a missing task said in words."""

import json
import math

import pytest

from entropy_lens.analysis.downstream import (
    COMMONSENSE_METRIC,
    LONGBENCH_GROUPS,
    commonsense_table,
    harness_scores,
    load_harness_run,
    longbench_table,
    table_markdown,
)
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError


def _results_file(path, scores: dict, *, eval_config=None, model_args=None):
    """An lm-eval results JSON: {task: {metric: fraction}} with lm-eval's ",none" filter and stderrs."""
    results = {}
    for task, metrics in scores.items():
        results[task] = {"alias": task}
        for metric, value in metrics.items():
            results[task][f"{metric},none"] = value
            results[task][f"{metric}_stderr,none"] = 0.01
    record = {"results": results, "config": {"model": "hf", "model_args": model_args or {}}}
    if eval_config is not None:
        record["entropy_lens"] = {"eval_config": eval_config, "model": {"train_len": 128}}
    path.write_text(json.dumps(record))
    return path


def _commonsense(offset: float) -> dict:
    """acc and acc_norm for every Table 1 task (acc_norm only where lm-eval has it), distinct values."""
    scores = {}
    for i, (task, metric) in enumerate(COMMONSENSE_METRIC.items()):
        scores[task] = {"acc": 0.30 + 0.01 * i + offset}
        if metric == "acc_norm":
            scores[task]["acc_norm"] = 0.50 + 0.01 * i + offset
    return scores


def test_table_1_takes_acc_norm_and_acc_for_boolq_and_winogrande(tmp_path):
    nope = _results_file(
        tmp_path / "nope.json",
        _commonsense(0.0),
        eval_config={"model": "path/to/TinyLlama-NoPE-1.1B", "nope": True, "max_length": None},
    )
    rope = _results_file(
        tmp_path / "rope.json", _commonsense(0.02), model_args={"pretrained": "org/TinyLlama-1.1B"}
    )
    table = commonsense_table([load_harness_run(nope), load_harness_run(rope)])
    assert list(table.index) == ["TinyLlama-NoPE-1.1B NoPE", "TinyLlama-1.1B"]
    assert list(table.columns) == ["Avg.", *COMMONSENSE_METRIC]
    row = table.loc["TinyLlama-NoPE-1.1B NoPE"]
    assert row["arc_challenge"] == pytest.approx(50.0) and row["piqa"] == pytest.approx(55.0)
    assert row["boolq"] == pytest.approx(32.0) and row["winogrande"] == pytest.approx(36.0)  # acc
    expected = [50.0, 51.0, 32.0, 53.0, 54.0, 55.0, 36.0]
    assert row["Avg."] == pytest.approx(sum(expected) / 7)
    assert table.loc["TinyLlama-1.1B", "Avg."] == pytest.approx(sum(expected) / 7 + 2.0)
    text = table_markdown(table)
    assert text.splitlines()[0].startswith("| Model | Avg. | arc_challenge |")
    assert "| TinyLlama-NoPE-1.1B NoPE | 47.3 | 50.0 | 51.0 | 32.0 |" in text
    assert "acc for boolq and winogrande" in text


def test_table_3_groups_longbench_as_the_paper(tmp_path):
    tasks = [task for group in LONGBENCH_GROUPS.values() for task in group.values()]
    assert len(tasks) == 16 and "longbench_repobench-p" in tasks
    scores = {task: {"score": 0.01 * (i + 1)} for i, task in enumerate(tasks)}
    scores["longbench_dureader"] = {"score": 0.99}  # a Chinese sub-task: not in the paper's table
    path = _results_file(
        tmp_path / "hs.json",
        scores,
        eval_config={"model": "hs8k", "head_scales": "hs/tiny-nope-512.safetensors", "max_length": 4096},
    )
    table = longbench_table([load_harness_run(path)])
    assert table.columns[0] == ("Ctx.", "") and table.columns[1] == ("Avg.", "")
    assert [c[0] for c in table.columns[2:5]] == ["Single-Doc QA"] * 3
    assert [c[1] for c in table.columns[2:]][:3] == ["NQA", "Qsp", "MulF"]
    assert table.columns[-1] == ("Code", "Re-P")
    row = table.iloc[0]
    assert row[("Ctx.", "")] == 4096 and row[("Avg.", "")] == pytest.approx(8.5)  # mean of 1..16
    assert row[("Synthetic", "PsgC")] == pytest.approx(13.0)
    assert table.index[0] == "hs8k λ(h) tiny-nope-512"
    assert "| hs8k λ(h) tiny-nope-512 | 4,096 | 8.5 | 1.0 |" in table_markdown(table)


def test_a_missing_task_leaves_the_average_undefined_and_says_why(tmp_path):
    scores = _commonsense(0.0)
    del scores["hellaswag"]
    path = _results_file(tmp_path / "part.json", scores)
    table = commonsense_table([load_harness_run(path, label="partial")])
    assert math.isnan(table.loc["partial", "Avg."]) and math.isnan(table.loc["partial", "hellaswag"])
    text = table_markdown(table)
    assert (
        "| partial | — |" in text and "partial: Avg. undefined because" in text and "lacks hellaswag" in text
    )
    tidy = harness_scores([load_harness_run(path, label="partial")])
    assert list(tidy.columns) == ["run", "task", "metric", "score"] and len(tidy) == 6
    assert set(tidy.loc[tidy.task == "boolq", "metric"]) == {"acc"}


def test_not_a_results_file(tmp_path):
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(EntropyLensError, match='no "results" object'):
        load_harness_run(tmp_path / "x.json")
    with pytest.raises(EntropyLensError, match="cannot read"):
        load_harness_run(tmp_path / "missing.json")


def test_eval_table_command(tmp_path, capsys):
    a = _results_file(tmp_path / "a.json", _commonsense(0.0))
    b = _results_file(tmp_path / "b.json", _commonsense(0.1))
    assert main(["eval-table", "1", str(a), str(b), "--labels", "RoPE", "NoPE"]) == 0
    out = capsys.readouterr().out
    assert "| RoPE | 47.3 |" in out and "| NoPE | 57.3 |" in out
    assert main(["eval-table", "1", str(a), "--out", str(tmp_path / "t.csv")]) == 0
    assert (tmp_path / "t.csv").read_text().startswith("Model,Avg.,arc_challenge")
    assert main(["eval-table", "1", str(a), "--labels", "x", "y"]) == 2
    assert "one name per file" in capsys.readouterr().err
    assert main(["eval-table", "3", str(a), "--out", str(tmp_path / "t.txt")]) == 2
    assert "write .md (Markdown) or .csv" in capsys.readouterr().err
