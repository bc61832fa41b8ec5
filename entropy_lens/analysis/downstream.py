"""The paper's downstream tables from lm-eval results files (`entropy-lens eval --out`, or `lm_eval
--output_path`'s results JSON): Table 1 (commonsense reasoning) and Table 3 (LongBench).

    runs = [load_harness_run("nope.json"), load_harness_run("rope.json", label="RoPE")]
    harness_scores(runs)       # tidy: run, task, metric, score (percent), one row per task a run holds
    commonsense_table(runs)    # Table 1: Avg. and the seven tasks, acc_norm (acc where lm-eval has none)
    longbench_table(runs)      # Table 3: Ctx., Avg. and the 16 English sub-tasks under the paper's groups
    table_markdown(table)      # the table as Markdown, with a line per cell that is undefined and why

Scores are percentages (lm-eval's fractions × 100), as the paper prints them. An average is defined only
where a run holds every task of the table; otherwise it is NaN and the table's `attrs["notes"]` say which
tasks are missing (Markdown prints "—" and the note). Imports json and pandas only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from entropy_lens.errors import EntropyLensError

__all__ = [
    "COMMONSENSE_METRIC",
    "COMMONSENSE_TASKS",
    "LONGBENCH_GROUPS",
    "LONGBENCH_METRIC",
    "HarnessRun",
    "commonsense_table",
    "harness_scores",
    "load_harness_run",
    "longbench_table",
    "table_markdown",
]

# Table 1, "following TinyLlama": acc_norm, and acc for boolq and winogrande, for which lm-eval has no acc_norm
COMMONSENSE_METRIC = {
    "arc_challenge": "acc_norm",
    "arc_easy": "acc_norm",
    "boolq": "acc",
    "hellaswag": "acc_norm",
    "openbookqa": "acc_norm",
    "piqa": "acc_norm",
    "winogrande": "acc",
}
COMMONSENSE_TASKS = tuple(COMMONSENSE_METRIC)
# Table 3: LongBench's English sub-tasks as the paper groups and abbreviates them (lm-eval task names)
LONGBENCH_GROUPS = {
    "Single-Doc QA": {
        "NQA": "longbench_narrativeqa",
        "Qsp": "longbench_qasper",
        "MulF": "longbench_multifieldqa_en",
    },
    "Multi-Doc QA": {
        "HpQA": "longbench_hotpotqa",
        "2WQA": "longbench_2wikimqa",
        "Musq.": "longbench_musique",
    },
    "Summarization": {
        "GRpt": "longbench_gov_report",
        "QSum": "longbench_qmsum",
        "MulN": "longbench_multi_news",
    },
    "Few-shot Learning": {"TREC": "longbench_trec", "TrQA": "longbench_triviaqa", "SSum": "longbench_samsum"},
    "Synthetic": {"PsgC": "longbench_passage_count", "PsgR": "longbench_passage_retrieval_en"},
    "Code": {"Lcc": "longbench_lcc", "Re-P": "longbench_repobench-p"},
}
LONGBENCH_METRIC = "score"  # lm-eval's longbench tasks: qa_f1, rouge, classification or code similarity


@dataclass(frozen=True)
class HarnessRun:
    """One lm-eval results file: its label (a table's row) and its per-task metrics."""

    label: str
    results: dict  # lm-eval's "results": {task: {"acc_norm,none": 0.43, ...}}
    context: int | None  # the model's input length (Table 3's Ctx.): --max-length, else its training length
    source: str


def load_harness_run(path: str | Path, *, label: str | None = None) -> HarnessRun:
    """The run in an lm-eval results JSON; EntropyLensError, in one line, for anything else."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise EntropyLensError(
            f"cannot read {path} as an lm-eval results JSON ({err}); pass a file written by "
            "`entropy-lens eval --out` or lm_eval --output_path"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("results"), dict):
        raise EntropyLensError(
            f'{path} has no "results" object, so it is not an lm-eval results file; pass one written by '
            "`entropy-lens eval --out` or lm_eval --output_path"
        )
    ours = record.get("entropy_lens") or {}
    config = ours.get("eval_config") or {}
    context = config.get("max_length") or (ours.get("model") or {}).get("train_len")
    return HarnessRun(
        label=label or _label(record, path),
        results=record["results"],
        context=int(context) if context else None,
        source=str(path),
    )


def _label(record: dict, path: Path) -> str:
    """The model and its variant, as `entropy-lens eval` recorded them; lm-eval's pretrained; the file."""
    config = (record.get("entropy_lens") or {}).get("eval_config")
    if config:
        name = Path(str(config["model"]).rstrip("/")).name
        parts = [name]
        if config.get("nope"):
            parts.append("NoPE")
        if config.get("scale") is not None:
            parts.append(f"λ = {config['scale']:g}/√d")
        if config.get("head_scales"):
            parts.append(f"λ(h) {Path(config['head_scales']).stem}")
        parts += [config[k] for k in ("scale_schedule", "rope_scaling") if config.get(k)]
        return " ".join(parts)
    args = (record.get("config") or {}).get("model_args")
    if isinstance(args, dict) and args.get("pretrained"):
        return Path(str(args["pretrained"]).rstrip("/")).name
    if isinstance(args, str) and "pretrained=" in args:
        return Path(args.split("pretrained=")[1].split(",")[0].rstrip("/")).name
    return path.stem


def _score(run: HarnessRun, task: str, metric: str) -> float | None:
    """`metric` of `task` in percent as the run reports it (its first filter), else None."""
    values = run.results.get(task)
    if not isinstance(values, dict):
        return None
    for key, value in values.items():
        if key.split(",")[0] == metric and isinstance(value, (int, float)) and not isinstance(value, bool):
            return 100.0 * float(value)
    return None


def _tasks() -> list[tuple[str, str]]:
    """(task, metric) of every column of Tables 1 and 3."""
    longbench = [(t, LONGBENCH_METRIC) for group in LONGBENCH_GROUPS.values() for t in group.values()]
    return list(COMMONSENSE_METRIC.items()) + longbench


def harness_scores(runs: list[HarnessRun]) -> pd.DataFrame:
    """Tidy scores: run, task, metric, score (percent), for every task of Tables 1 and 3 a run holds."""
    rows = []
    for run in runs:
        for task, metric in _tasks():
            score = _score(run, task, metric)
            if score is not None:
                rows.append({"run": run.label, "task": task, "metric": metric, "score": score})
    return pd.DataFrame(rows, columns=["run", "task", "metric", "score"])


def commonsense_table(runs: list[HarnessRun]) -> pd.DataFrame:
    """Table 1: one row per run; Avg. (the mean of the seven) and each task's acc_norm (acc for boolq and
    winogrande), in percent."""
    table = _wide(runs, [(t, t, m) for t, m in COMMONSENSE_METRIC.items()], context=False)
    table.attrs["notes"].insert(
        0, "acc_norm; acc for boolq and winogrande (lm-eval reports no acc_norm for them)"
    )
    return table


def longbench_table(runs: list[HarnessRun]) -> pd.DataFrame:
    """Table 3: one row per run; Ctx., Avg. (the mean of the 16 sub-tasks) and each sub-task's score in
    percent, the columns (group, abbreviation) as the paper groups them."""
    columns = [
        ((group, short), task, LONGBENCH_METRIC)
        for group, tasks in LONGBENCH_GROUPS.items()
        for short, task in tasks.items()
    ]
    return _wide(runs, columns, context=True)


def _wide(runs: list[HarnessRun], columns: list[tuple], *, context: bool) -> pd.DataFrame:
    """One row per run: each (column, task, metric)'s score, and their mean where every one is there."""
    if not runs:
        raise EntropyLensError("no results files given; pass one or more lm-eval results JSON files")
    rows, notes = [], []
    for run in runs:
        row = {"Ctx.": run.context} if context else {}
        missing = []
        for column, task, metric in columns:
            score = _score(run, task, metric)
            row[column] = math.nan if score is None else score
            if score is None:
                missing.append(task)
        cells = [row[c] for c, _, _ in columns]
        row["Avg."] = math.nan if missing else sum(cells) / len(cells)
        if missing:
            notes.append(f"{run.label}: Avg. undefined because {run.source} lacks {', '.join(missing)}")
        rows.append(row)
    first = ["Ctx.", "Avg."] if context else ["Avg."]
    order = first + [c for c, _, _ in columns]
    table = pd.DataFrame(rows, index=pd.Index([r.label for r in runs], name="Model"))[order]
    if context:
        table.columns = pd.MultiIndex.from_tuples([(c, "") if isinstance(c, str) else c for c in order])
    table.attrs["notes"] = notes
    return table


def table_markdown(table: pd.DataFrame, *, digits: int = 1) -> str:
    """The table as Markdown (grouped columns as "group: name"), "—" where a score is missing, then its notes."""
    names = [" ".join(p for p in c if p) if isinstance(c, tuple) else str(c) for c in table.columns]
    lines = ["| Model | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, row in table.iterrows():
        cells = []
        for name, value in zip(names, row):
            if value is None or (isinstance(value, float) and math.isnan(value)):
                cells.append("—")
            elif name == "Ctx.":
                cells.append(f"{int(value):,}")
            else:
                cells.append(f"{value:.{digits}f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    notes = table.attrs.get("notes") or []
    return "\n".join(lines + ([""] + [f"- {n}" for n in notes] if notes else []))
