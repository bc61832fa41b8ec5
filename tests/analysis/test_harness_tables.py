"""Tables 1 and 3 from lm-eval results files (analysis/downstream.py, `entropy-lens eval-table`), on
synthetic results files: the metric each column takes, the averages, the paper's LongBench groups, the
label of a run, a missing task said in words."""

import json
import math
import re

import pytest

from entropy_lens.analysis.downstream import (
    COMMONSENSE_METRIC,
    LONGBENCH_GROUPS,
    commonsense_table,
    csv_text,
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


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_labels_from_files_are_escaped_and_cleaned(tmp_path, capsys):
    """A label with HTML and `|` cannot add HTML or shift the columns (arc_easy's 50.0 stays under
    arc_easy); control characters are dropped; a CSV label cannot be a spreadsheet formula."""
    scores = {task: {metric: 0.5} for task, metric in COMMONSENSE_METRIC.items()}
    bad = "<img src=x onerror=alert(1)>|\x1b[2J\u202e"
    path = _results_file(tmp_path / "x.json", scores, eval_config={"model": bad, "max_length": None})
    assert main(["eval-table", "1", str(path), "--out", str(tmp_path / "t.md")]) == 0
    text = (tmp_path / "t.md").read_text()
    assert not re.search(r"(?<!\\)[<>]", text) and "\x1b" not in text and "\u202e" not in text
    header, _, row = text.splitlines()[:3]
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
    names = [c.strip() for c in header.split("|")[1:-1]]
    assert len(cells) == len(names) and cells[names.index("arc_easy")] == "50.0"
    assert cells[0] == r"\<img src=x onerror=alert(1)\>\|\[2J"
    runs = [
        load_harness_run(path, label=label) for label in ("=HYPERLINK(1)", "@SUM(1)", " -2+3", "+1", "ok")
    ]
    assert main(["eval-table", "1", str(path), "--labels", "=cmd", "--out", str(tmp_path / "t.csv")]) == 0
    assert (tmp_path / "t.csv").read_text().splitlines()[1].startswith("'=cmd,")
    assert [csv_text(r.label) for r in runs] == ["'=HYPERLINK(1)", "'@SUM(1)", "' -2+3", "'+1", "ok"]


@pytest.mark.parametrize("value", [5.0, -2, 1.0000001])
def test_a_score_outside_0_1_is_refused(tmp_path, capsys, value):
    scores = {task: {metric: 0.5} for task, metric in COMMONSENSE_METRIC.items()}
    scores["arc_easy"]["acc_norm"] = value
    path = _results_file(tmp_path / "x.json", scores)
    assert main(["eval-table", "1", str(path)]) == 2
    err = _one_line_error(capsys)
    assert f"results.arc_easy.acc_norm,none is {value!r}, not in [0, 1]" in err and "500.0" not in err


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ({"entropy_lens": "str"}, "entropy_lens is 'str', not an object"),
        ({"entropy_lens": {"eval_config": [1]}}, "entropy_lens.eval_config is [1], not an object"),
        ({"entropy_lens": {"eval_config": {"model": 3}}}, "entropy_lens.eval_config.model is 3, not text"),
        ({"entropy_lens": {"eval_config": {"model": "m", "scale": "x"}}}, "scale is 'x', not a number"),
        ({"entropy_lens": {"eval_config": {"model": "m", "nope": "false"}}}, "nope is 'false', not true or"),
        ({"entropy_lens": {"eval_config": {"max_length": "4k"}}}, "max_length is '4k', not a whole number"),
        ({"entropy_lens": {"model": {"train_len": -1}}}, "train_len is -1, not a whole number at least 0"),
        ({"config": {"model_args": {"pretrained": 1}}}, "config.model_args.pretrained is 1, not text"),
        ({"results": {"arc_easy": "x"}}, "results.arc_easy is 'x', not an object of metrics"),
        ({"results": {"arc_easy": {"acc_norm,none": "abc"}}}, "acc_norm,none is 'abc', not a number"),
        ({"results": {"arc_easy": {"acc_norm,none": True}}}, "acc_norm,none is True, not a number"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line(tmp_path, capsys, record, said):
    """Wrong types anywhere the table reads are refused, naming the key, never a traceback; a score that
    is no number is said to be one (not "lacks arc_easy")."""
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"results": {}, **record}))
    assert main(["eval-table", "1", str(path)]) == 2
    err = _one_line_error(capsys)
    assert said in err and str(path) in err and "lacks" not in err
