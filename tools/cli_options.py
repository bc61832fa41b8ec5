"""Write every command's options and defaults to tests/cli_options.json (tests/cli/test_cli.py holds the CLI
to it, so a changed flag or default is a deliberate, reviewed change of that file).

    python tools/cli_options.py           # rewrite the file
    python tools/cli_options.py --check   # exit 1 if the CLI differs from it
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from entropy_lens.cli import option_table

FILE = Path(__file__).parent.parent / "tests" / "cli_options.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    text = json.dumps(option_table(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if args.check:
        same = FILE.read_text(encoding="utf-8") == text
        print(f"{FILE}: {'unchanged' if same else 'differs from the CLI'}")
        return 0 if same else 1
    FILE.write_text(text, encoding="utf-8")
    print(f"wrote {FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
