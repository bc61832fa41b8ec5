"""The kvpress guide's pipeline example run as written: SmolLM2's answer without a press and with the lens
press, and the keys each prefill kept.

    .venv-kvpress/bin/python benchmarks/kvpress_answers.py [--tokens 2048] [--threads 2]
                                                           [--out benchmarks/results/kvpress_answers.json]

Runs the Python block of docs/guides/kvpress.md that sets `TOKENS = 2_048` (the pipeline with and without
`ObservedAttentionPress`), in the kvpress environment (`make kvpress-env`), and records what it printed
with the block's SHA-256 (`--tokens` runs it at another length, as the tests do: the record says which).
benchmarks/readme_tables.py writes the printed lines into the guide, between `<!-- output
kvpress_answers -->` and `<!-- /output kvpress_answers -->`; tests/benchmarks/test_kvpress_answers.py
holds the guide to the record and the record to the block: the guide's numbers are this run's, never typed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import make_record, parser, write_json

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "kvpress.md"
WRITTEN = "TOKENS = 2_048"  # the block's length, as the guide writes it


def guide_block(text: str) -> str:
    """The guide's Python block that sets the length (`WRITTEN`): the pipeline with and without the press."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL) if WRITTEN in b]
    if len(blocks) != 1:
        raise ValueError(f"{GUIDE.name} holds {len(blocks)} Python blocks with {WRITTEN!r}, not one")
    return blocks[0]


def block_sha256(block: str) -> str:
    return hashlib.sha256(block.encode("utf-8")).hexdigest()


def run(tokens: int, threads: int) -> dict:
    """The block executed as written (its length `tokens`), what it printed, line by line."""
    import kvpress
    import torch
    import transformers

    torch.set_num_threads(threads)
    block = guide_block(GUIDE.read_text(encoding="utf-8"))
    code = block.replace(WRITTEN, f"TOKENS = {tokens:_}")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(GUIDE), "exec"), {})  # noqa: S102 - the guide's own code
    return {
        "tokens": tokens,
        "block_sha256": block_sha256(block),
        "printed": printed.getvalue().splitlines(),
        "transformers": transformers.__version__,
        "kvpress": getattr(kvpress, "__version__", None) or _version("kvpress"),
    }


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def main() -> None:
    ap = parser(__doc__, "kvpress_answers")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    found = run(args.tokens, args.threads)
    write_json(args.out, make_record("kvpress_answers", threads=args.threads, **found, rows=[]))
    print("\n".join(found["printed"]))


if __name__ == "__main__":
    main()
