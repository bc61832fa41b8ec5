"""`entropy-lens` command line: thin subcommands over the functions notebooks call.

Each module here adds its subcommands (`add_parsers(sub)`) and runs them; heavy imports (torch,
transformers) happen inside each command, so `--help` is instant. Bad input exits with status 2
and one line saying what is wrong and how to fix it. Every command takes `--threads N`, applied once
before the command runs (runs/threads.py).
"""

from __future__ import annotations

import argparse
import sys

from entropy_lens.cli import analysis, figures, heads, perplexity, scan, train

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from entropy_lens import __version__

    parser = argparse.ArgumentParser(prog="entropy-lens", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"entropy-lens {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (scan, perplexity, analysis, train, heads, figures):
        module.add_parsers(sub)
    for command in sub.choices.values():  # one flag, applied once in main() before any work
        command.add_argument(
            "--threads",
            type=int,
            metavar="N",
            help="CPU threads for torch (default: OMP_NUM_THREADS, else one per core); on a machine "
            "shared with other busy processes use at most the free cores, e.g. --threads 1",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.runs.threads import set_threads

    args = build_parser().parse_args(argv)
    try:
        set_threads(args.threads)
        return args.func(args)
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("entropy-lens: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
