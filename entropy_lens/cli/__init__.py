"""`entropy-lens` command line: thin subcommands over the functions notebooks call.

Each module here adds its subcommands (`add_parsers(sub)`) and runs them; heavy imports (torch,
transformers) happen inside each command, so `--help` is instant. Bad input exits with status 2
and one line saying what is wrong and how to fix it.
"""

from __future__ import annotations

import argparse
import sys

from entropy_lens.cli import analysis, figures, heads, scan, train

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from entropy_lens import __version__

    parser = argparse.ArgumentParser(prog="entropy-lens", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"entropy-lens {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (scan, analysis, train, heads, figures):
        module.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from entropy_lens.errors import EntropyLensError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("entropy-lens: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
