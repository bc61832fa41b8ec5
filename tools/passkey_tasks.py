"""Write the passkey tasks' YAML files, entropy_lens/harness/tasks/entropy_lens_passkey_<W>.yaml, one per
window length W in LENGTHS (tests/harness/test_harness_passkey.py holds the folder to this script).

    python tools/passkey_tasks.py           # rewrite the files
    python tools/passkey_tasks.py --check   # exit 1 if the folder differs
"""

from __future__ import annotations

import argparse
import sys

from entropy_lens.harness import TASKS_DIR

LENGTHS = tuple(2**p for p in range(6, 18))  # 64 ... 131072 tokens: the tiny models' and the paper's
TEMPLATE = """\
include: _passkey_template_yaml
task: entropy_lens_passkey_{length}
metadata:
  version: 1.0
  passkey_length: {length}
"""


def expected() -> dict[str, str]:
    """{file name: text} of every length's task."""
    return {f"entropy_lens_passkey_{w}.yaml": TEMPLATE.format(length=w) for w in LENGTHS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    files = expected()
    there = {p.name: p.read_text(encoding="utf-8") for p in TASKS_DIR.glob("entropy_lens_passkey_*.yaml")}
    if args.check:
        same = there == files
        print(f"{TASKS_DIR}: {'unchanged' if same else 'differs from tools/passkey_tasks.py'}")
        return 0 if same else 1
    for name in set(there) - set(files):
        (TASKS_DIR / name).unlink()
    for name, text in files.items():
        (TASKS_DIR / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} tasks to {TASKS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
