"""The paper's downstream tables from lm-eval results files (`entropy-lens eval --out`, or `lm_eval
--output_path`'s results JSON): Table 1 (commonsense reasoning) and Table 3 (LongBench).

    runs = [load_harness_run("nope.json"), load_harness_run("rope.json", label="RoPE")]
    harness_scores(runs)       # tidy: run, task, metric, score (percent), one row per task a run holds
    commonsense_table(runs)    # Table 1: Avg. and the seven tasks, acc_norm (acc where lm-eval has none)
    longbench_table(runs)      # Table 3: Ctx., Avg. and the 16 English sub-tasks under the paper's groups
    table_markdown(table)      # the table as Markdown, with a line per cell that is undefined and why
    table_csv(table)           # the table as CSV, no label a spreadsheet would read as a formula

Scores are percentages (lm-eval's fractions × 100), as the paper prints them. An average is defined only
where a run holds every task of the table; otherwise it is NaN and the table's `attrs["notes"]` say which
tasks are missing (Markdown prints "—" and the note). Imports json and pandas only.

A results file is input, not trusted: every value a table reads is checked for its type when the file
is loaded (a score: a number in [0, 1], lm-eval's fractions; a label's parts: text, a number, true or
false), each refused in one line naming the file, the key and what it should be. Strings from files
lose their control characters (`clean_text`); labels are escaped where they are written: Markdown's
table and HTML characters (`|` would shift every column), and a CSV cell that a spreadsheet would run
as a formula (a leading =, +, -, @) is quoted with a leading apostrophe.
"""

from __future__ import annotations

import json
import math
import numbers
import re
import typing
import unicodedata
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
    "clean_text",
    "commonsense_table",
    "csv_text",
    "harness_scores",
    "load_harness_run",
    "longbench_table",
    "markdown_text",
    "table_csv",
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
    """The run in an lm-eval results JSON; EntropyLensError, in one line, for anything else (a value of
    the wrong type, a score that is no number or outside [0, 1])."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: nesting too deep
        raise EntropyLensError(
            f"cannot read {path} as an lm-eval results JSON ({err}); pass a file written by "
            "`entropy-lens eval --out` or lm_eval --output_path"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("results"), dict):
        raise EntropyLensError(
            f'{path} has no "results" object, so it is not an lm-eval results file; pass one written by '
            "`entropy-lens eval --out` or lm_eval --output_path"
        )
    file = _File(path)
    ours = file.object(record, "entropy_lens")
    config = file.object(ours, "eval_config", "entropy_lens.")
    model = file.object(ours, "model", "entropy_lens.")
    context = file.value(config, "max_length", int, "entropy_lens.eval_config.") or file.value(
        model, "train_len", int, "entropy_lens.model."
    )
    for task, metric in _tasks():
        file.score(record["results"], task, metric)
    return HarnessRun(
        label=clean_text(label) if label is not None else _label(record, file),
        results=record["results"],
        context=context,
        source=str(path),
    )


class _File:
    """The checks of one results file's values, each refused in one line naming the file and the key."""

    WORDS: typing.ClassVar[dict] = {
        dict: "an object",
        str: "text",
        int: "a whole number",
        float: "a number",
        bool: "true or false",
    }

    def __init__(self, path: Path):
        self.path = path

    def refuse(self, key: str, value, words: str):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise EntropyLensError(
            f"{self.path}: {key} is {shown}, not {words}; pass a results file as `entropy-lens eval --out` or "
            "lm_eval --output_path writes it (or correct that value)"
        )

    def value(self, mapping: dict, key: str, kind: type, within: str = ""):
        """mapping[key] where it is of `kind` (a bool is no number); None where it is absent or null."""
        value = mapping.get(key)
        if value is None:
            return None
        if kind is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = isinstance(value, kind)
        if not ok:
            self.refuse(within + key, value, self.WORDS[kind] + (" at least 0" if kind is int else ""))
        return value

    def object(self, mapping: dict, key: str, within: str = "") -> dict:
        return self.value(mapping, key, dict, within) or {}

    def score(self, results: dict, task: str, metric: str) -> float | None:
        """`metric` of `task` as the run reports it (its first filter), a fraction; None where absent."""
        values = results.get(task)
        if values is None:
            return None
        if not isinstance(values, dict):
            self.refuse(f"results.{task}", values, "an object of metrics")
        for key, value in values.items():
            if key.split(",")[0] != metric:
                continue
            if not isinstance(value, numbers.Real) or isinstance(value, bool) or math.isnan(value):
                self.refuse(f"results.{task}.{key}", value, f"a number ({metric} as a fraction, 0 to 1)")
            if not 0 <= value <= 1:
                self.refuse(
                    f"results.{task}.{key}", value, f"in [0, 1] (lm-eval writes {metric} as a fraction)"
                )
            return float(value)
        return None


def _label(record: dict, file: _File) -> str:
    """The model and its variant, as `entropy-lens eval` recorded them; lm-eval's pretrained; the file."""
    ours = file.object(record, "entropy_lens")
    config = file.object(ours, "eval_config", "entropy_lens.")
    where = "entropy_lens.eval_config."
    name = file.value(config, "model", str, where)
    if name:
        parts = [_name(name)]
        if file.value(config, "nope", bool, where):
            parts.append("NoPE")
        if (scale := file.value(config, "scale", float, where)) is not None:
            parts.append(f"λ = {scale:g}/√d")
        if head_scales := file.value(config, "head_scales", str, where):
            parts.append(f"λ(h) {Path(clean_text(head_scales)).stem}")
        parts += [
            clean_text(v)
            for k in ("scale_schedule", "rope_scaling")
            if (v := file.value(config, k, str, where))
        ]
        return " ".join(parts)
    lm_eval_config = file.object(record, "config")
    args = lm_eval_config.get("model_args")
    if isinstance(args, dict) and (pretrained := file.value(args, "pretrained", str, "config.model_args.")):
        return _name(pretrained)
    if isinstance(args, str) and "pretrained=" in args:
        return _name(args.split("pretrained=")[1].split(",")[0])
    return clean_text(file.path.stem)


def _name(checkpoint: str) -> str:
    """A checkpoint's last path part (a folder's, a Hub id's name), its control characters removed."""
    return Path(clean_text(checkpoint).rstrip("/")).name or clean_text(checkpoint)


def clean_text(text: str) -> str:
    """`text` without control characters (C0/C1 controls, format characters such as bidi overrides,
    line and paragraph separators): a string read from a file cannot move the cursor, reorder what is
    shown or start a new table row."""
    return "".join(c for c in str(text) if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp"))


def _score(run: HarnessRun, task: str, metric: str) -> float | None:
    """`metric` of `task` in percent as the run reports it (its first filter; load_harness_run checked
    it is a fraction), else None."""
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
    """The table as Markdown (grouped columns as "group: name"), "—" where a score is missing, then its
    notes; the labels and notes escaped (`markdown_text`)."""
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
        lines.append(f"| {markdown_text(label)} | " + " | ".join(cells) + " |")
    notes = table.attrs.get("notes") or []
    return "\n".join(lines + ([""] + [f"- {markdown_text(n)}" for n in notes] if notes else []))


# what turns text in a Markdown table cell into structure: a cell boundary (|), HTML (<, >, &), code,
# emphasis or a link; an underscore only at a word's edge (GitHub's Markdown emphasises nothing inside a
# word, so task names keep theirs)
MARKDOWN_SPECIAL = re.compile(r"[\\|<>&`*\[\]~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown_text(text) -> str:
    """`text` for a Markdown table cell: its control characters removed (`clean_text`) and each
    character that Markdown or HTML would read escaped with a backslash."""
    return MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), clean_text(text))


def table_csv(table: pd.DataFrame) -> str:
    """The table as CSV; a label that a spreadsheet would read as a formula (its first character, after
    spaces, one of = + - @) starts with an apostrophe, as OWASP's CSV-injection advice says."""
    out = table.copy()
    out.index = pd.Index([csv_text(label) for label in table.index], name=table.index.name)
    return out.to_csv()


def csv_text(text) -> str:
    """`text` for a CSV cell: control characters removed, a formula's first character made text."""
    text = clean_text(text)
    return "'" + text if text.lstrip()[:1] in ("=", "+", "-", "@") else text
