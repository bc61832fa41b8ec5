"""The README's performance tables, made from the benchmarks' JSON (never typed by hand).

    python benchmarks/readme_tables.py      # prints the Markdown; tests/test_benchmarks.py holds the README to it

Each table comes from one file in benchmarks/results/, written by the script of the same name.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def threads_table(record: dict) -> str:
    rows = [
        "| busy processes | `--threads` | threads | scan s | tok/s |",
        "|---|---|---|---|---|",
    ]
    for r in record["rows"]:
        rows.append(
            f"| {r['busy_processes']} | {r['threads_flag']} | {r['threads']} | {r['scan_s']:.2f} | "
            f"{r['tok_per_s']:,.0f} |"
        )
    return "\n".join(rows)


def extras_table(record: dict) -> str:
    modes = [k.removesuffix("_s") for k in record["rows"][0] if k.endswith("_s")]
    rows = [
        "| len | " + " | ".join(f"`{m}` s (× sdpa)" for m in modes) + " |",
        "|---" * (len(modes) + 1) + "|",
    ]
    for r in record["rows"]:
        cells = [f"{r[m + '_s']:.3f} ({r[m + '_s'] / r['sdpa_s']:.1f}×)" for m in modes]
        rows.append(f"| {r['len']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


TABLES = {"threads_cpu": threads_table, "extras_cpu": extras_table}


def tables() -> dict[str, str]:
    """name -> the Markdown table of benchmarks/results/<name>.json."""
    return {name: make(json.loads((RESULTS / f"{name}.json").read_text())) for name, make in TABLES.items()}


if __name__ == "__main__":
    for name, table in tables().items():
        print(f"<!-- {name} -->\n{table}\n")
