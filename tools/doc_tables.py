"""The documentation's tables that restate a declaration, made from it (never typed by hand):

    python tools/doc_tables.py           # rewrite every region below in place
    python tools/doc_tables.py --check   # exit 1, naming the stale files, if one differs

- docs/guides/statistics.md: the statistics, one row each, from `entropy_lens.statistics.STATISTICS` and
  `KEY_STATISTICS` (name, unit, definition, bound, reduction, axis), between `<!-- table statistics -->`
  and `<!-- /table statistics -->` (and `key_statistics`, and `row_slice_statistics` from
  `ROW_SLICE_STATISTICS`).
- docs/internals/layout.md: the package table's "may import" column, from tests/test_layout.py's `ALLOWED`;
  its "owns" column stays written by hand, one row per package of ALLOWED (a package without a row, or a
  row without a package, is refused: write the row, or remove it), in ALLOWED's order; and the floors
  sentence ("Imports run one way: ... (torch-free)."), each package on the floor above everything it
  may import (for contributors: the package docstring, which opens the API page, points there).
- README.md: the statistics cell of "What is supported", between `<!-- statistics -->` and
  `<!-- /statistics -->` on its line, from the same declarations (name and unit).
- docs/guides/passkey.md: the retrieval heads of the bundled models, between `<!-- table retrieval_heads -->`
  and `<!-- /table retrieval_heads -->`, from the passkey records in figures/runs/ (RETRIEVAL_RECORDS, made
  by the commands the table's caption names) through `analysis.retrieval_heads`: per model and length,
  its accuracy and its heads of the highest mean score, or "none" where every head scores 0.

tests/docs/test_doc_tables.py holds each committed region equal to what this writes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np

from entropy_lens.analysis import retrieval_heads
from entropy_lens.statistics import (
    KEY_STATISTICS,
    LOG_BOUND,
    POSITION_BOUND,
    ROW_SLICE_STATISTICS,
    STATISTICS,
    Statistic,
)

ROOT = Path(__file__).resolve().parent.parent
STATISTICS_PAGE = ROOT / "docs" / "guides" / "statistics.md"
LAYOUT_PAGE = ROOT / "docs" / "internals" / "layout.md"
README = ROOT / "README.md"
BOUNDS = {LOG_BOUND: "ln(i + 1)", POSITION_BOUND: "i", None: "—"}  # the largest value at position i
LAYOUT_HEADER = ("| package | owns | may import |", "|---|---|---|")
PASSKEY_PAGE = ROOT / "docs" / "guides" / "passkey.md"
RUNS = ROOT / "figures" / "runs"
# the passkey records of the retrieval-heads table, in its order (each made by the command its caption names)
RETRIEVAL_RECORDS = tuple(
    RUNS / f"retrieval-{name}.json"
    for name in ("tiny-nope-128", "tiny-rope-128", "tiny-alibi-128", "smollm2-1024")
)
TOP_HEADS = 5  # the heads each row lists


def _layout_test():
    """tests/test_layout.py as a module (its ALLOWED and BASE are the layering's one declaration)."""
    spec = importlib.util.spec_from_file_location("test_layout", ROOT / "tests" / "test_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def statistics_table(declared: dict[str, Statistic]) -> str:
    """One row per statistic of `declared`, in its order."""
    rows = [
        "| name | unit | definition | bound at position i | reduction | axis |",
        "|---|---|---|---|---|---|",
    ]
    for s in declared.values():
        rows.append(
            f"| `{s.name}` | {_cell(s.unit)} | {_cell(s.description)} | {BOUNDS[s.bound]} | "
            f"{s.reduction.name} | {s.axis} |"
        )
    return "\n".join(rows)


def floors(allowed: dict[str, set[str]], base: set[str]) -> list[list[str]]:
    """The packages of `allowed` (less `base`) by floor, the highest first: a package's floor is one above
    the highest floor it may import (0 where it imports none), so each imports only from floors below."""
    level: dict[str, int] = {}

    def floor(name: str) -> int:
        if name not in level:
            below = [floor(t) for t in allowed[name] if t not in base]
            level[name] = 1 + max(below, default=-1)
        return level[name]

    names = [name for name in allowed if name not in base]
    top = max(map(floor, names))
    return [[n for n in names if level[n] == k] for k in range(top, -1, -1)]


def floors_line(allowed: dict[str, set[str]], base: set[str]) -> str:
    shown = sorted(b for b in base if b in allowed)
    return textwrap.fill(
        "Imports run one way: each package imports only from the floors after its own (tests/test_layout.py's "
        "ALLOWED says which), "
        + " → ".join(", ".join(f"`{n}`" for n in f) for f in floors(allowed, base))
        + "; and any of them from "
        + ", ".join(f"`{n}`" for n in shown)
        + " (torch-free).",
        width=100,
        break_on_hyphens=False,
    )


def _package_cell(name: str) -> str:
    return f"`{name}/`" if (ROOT / "entropy_lens" / name).is_dir() else f"`{name}.py`"


def layout_table(text: str, allowed: dict[str, set[str]]) -> str:
    """The package table of layout.md's `text`, its rows in ALLOWED's order, each "may import" cell from
    ALLOWED (in ALLOWED's order; "—" for none), each "owns" cell as written. ValueError naming the rows
    that a package lacks or that name no package."""
    start = text.index(LAYOUT_HEADER[0])
    end = text.index("\n\n", start)
    owns = {}
    for row in text[start:end].splitlines()[2:]:
        cells = row.strip("|").split(" | ")
        owns[cells[0].strip().strip("`").removesuffix("/").removesuffix(".py")] = " | ".join(cells[1:-1])
    missing = [name for name in allowed if name not in owns]
    extra = [name for name in owns if name not in allowed]
    if missing or extra:
        raise ValueError(
            f"{LAYOUT_PAGE.relative_to(ROOT)}'s package table: "
            + "; ".join(
                filter(
                    None,
                    [
                        f"no row for {', '.join(missing)} (write one: | `name/` | what it owns | - |)"
                        if missing
                        else "",
                        f"rows for {', '.join(extra)}, not in tests/test_layout.py's ALLOWED (remove them, or "
                        "add the package there)"
                        if extra
                        else "",
                    ],
                )
            )
        )
    rows = list(LAYOUT_HEADER)
    for name, imports in allowed.items():
        may = ", ".join(n for n in allowed if n in imports) or "—"
        rows.append(f"| {_package_cell(name)} | {owns[name]} | {may} |")
    return text[:start] + "\n".join(rows) + text[end:]


def replace_region(text: str, name: str, body: str, where: str) -> str:
    """`text` with what stands between `<!-- name -->` and `<!-- /name -->` replaced by `body`."""
    pattern = re.compile(rf"(<!-- {re.escape(name)} -->\n)(.*?)(<!-- /{re.escape(name)} -->)", re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{where}: no region (or several) between <!-- {name} --> and <!-- /{name} -->")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(3), text)


def statistics_cell() -> str:
    """The README's one-line list: each row statistic and each key statistic, by name and unit."""
    rows = ", ".join(f"`{s.name}` ({s.unit})" for s in STATISTICS.values())
    keys = ", ".join(f"`{s.name}`" for s in KEY_STATISTICS.values())
    sliced = ", ".join(f"`{s.name}`" for s in ROW_SLICE_STATISTICS.values())
    params = ", ".join(f"`{s.sliced.name}`" for s in ROW_SLICE_STATISTICS.values())
    return (
        f"per query row: {rows}; with a parameter of their own ({params}: `row_slice_stats`, per generated "
        f"token, summed in scans and recorders): {sliced}; per key (attention received, "
        f"`attention_received`): {keys}"
    )


def replace_inline(text: str, name: str, body: str, where: str) -> str:
    """`text` with what stands between `<!-- name -->` and `<!-- /name -->` on one line replaced by `body`."""
    pattern = re.compile(rf"(<!-- {re.escape(name)} -->)([^\n]*?)(<!-- /{re.escape(name)} -->)")
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{where}: no line (or several) with <!-- {name} --> ... <!-- /{name} -->")
    return pattern.sub(lambda m: m.group(1) + " " + body + " " + m.group(3), text)


FLOORS = re.compile(r"Imports run one way: .*?\(torch-free\)\.", re.DOTALL)


def replace_floors(text: str, line: str, where: str) -> str:
    """`text` with its floors sentence (from "Imports run one way: " to "(torch-free).") replaced by `line`."""
    if len(FLOORS.findall(text)) != 1:
        raise ValueError(f"{where}: no sentence (or several) from 'Imports run one way: ' to '(torch-free).'")
    return FLOORS.sub(lambda m: line, text)


def top_heads(scores, n: int) -> list[tuple[int, int, float]]:
    """The `n` heads of the highest score among those above 0, as (layer, head, score), the highest first
    (ties: the lower layer, then head)."""
    order = np.argsort(-scores, axis=None, kind="stable")
    heads = [(*divmod(int(i), scores.shape[1]), float(scores.flat[i])) for i in order]
    return [h for h in heads if h[2] > 0][:n]


def retrieval_table(records: dict[str, dict], top: int = TOP_HEADS) -> str:
    """The passkey guide's table: one row per (record, length), its accuracy and its `top` retrieval heads
    (`analysis.retrieval_heads`: the mean score over the trials of that length), then the caption naming
    what made each record. `records` maps a name the caption shows (the file's) to its record."""
    rows = [
        "| model | length (L) | trials (depths × keys) | accuracy | heads of the highest mean score (layer.head: score) |",
        "|---|---|---|---|---|",
    ]
    commands = []
    for name, record in records.items():
        config = record["config"]
        for length in sorted({c["length"] for c in record["results"]}):
            cells = [c for c in record["results"] if c["length"] == length]
            trials = sum(c["trials"] for c in cells)
            accuracy = sum(c["correct"] for c in cells) / trials
            heads = top_heads(retrieval_heads(record, length), top)
            listed = (
                ", ".join(f"{layer}.{head}: {score:.3f}" for layer, head, score in heads)
                if heads
                else "none: every head scores 0 (no answer token's most probable key copies the needle)"
            )
            rows.append(
                f"| {config['model']} | {length} ({record['model']['train_len']}) | {trials} ({config['depths']} × {config['keys']}) | "
                f"{accuracy:.2f} | {listed} |"
            )
        lens = " ".join(map(str, config["lengths"]))
        commands.append(
            f"`entropy-lens passkey {config['model']} --lens {lens} --depths {config['depths']} --keys "
            f"{config['keys']} --out figures/runs/{name}`"
        )
    caption = (
        f"*Retrieval heads (Wu et al., 2024) of the bundled models: per model and length, the passkey "
        f"accuracy and up to {top} heads (layer.head, from 0) of the highest retrieval score, the mean over "
        "the trials: per trial, the answer tokens at which the head's most probable key lies in the needle "
        "sentence and holds the very token written, over the needle's tokens (at most the answer's share of "
        "the needle, far below 1). L: the length the model was trained at. Made by "
        "`python tools/doc_tables.py` from the records that " + "; ".join(commands) + " wrote.*"
    )
    return (
        "\n".join(rows)
        + "\n\n"
        + textwrap.fill(caption, width=100, break_on_hyphens=False, break_long_words=False)
    )


def read_records(paths=RETRIEVAL_RECORDS) -> dict[str, dict]:
    """{file name: record} of the passkey records `paths`."""
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in paths}


def expected() -> dict[Path, str]:
    """Each file this tool writes, as it should read."""
    layout = _layout_test()
    line = floors_line(layout.ALLOWED, layout.BASE)
    page = STATISTICS_PAGE.read_text(encoding="utf-8")
    page = replace_region(page, "table statistics", statistics_table(STATISTICS), str(STATISTICS_PAGE))
    page = replace_region(
        page, "table key_statistics", statistics_table(KEY_STATISTICS), str(STATISTICS_PAGE)
    )
    page = replace_region(
        page, "table row_slice_statistics", statistics_table(ROW_SLICE_STATISTICS), str(STATISTICS_PAGE)
    )
    text = LAYOUT_PAGE.read_text(encoding="utf-8")
    text = replace_floors(layout_table(text, layout.ALLOWED), line, str(LAYOUT_PAGE))
    readme = replace_inline(README.read_text(encoding="utf-8"), "statistics", statistics_cell(), str(README))
    passkey = replace_region(
        PASSKEY_PAGE.read_text(encoding="utf-8"),
        "table retrieval_heads",
        retrieval_table(read_records()),
        str(PASSKEY_PAGE),
    )
    return {STATISTICS_PAGE: page, LAYOUT_PAGE: text, README: readme, PASSKEY_PAGE: passkey}


def stale() -> list[str]:
    """The files whose committed text differs from what this tool writes, relative to the root."""
    return [
        str(p.relative_to(ROOT)) for p, text in expected().items() if p.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    if args.check:
        differ = stale()
        print("stale: " + ", ".join(differ) + " (run python tools/doc_tables.py)" if differ else "unchanged")
        return 1 if differ else 0
    for path, text in expected().items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
