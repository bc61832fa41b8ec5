"""What the command-line tests share (pytest puts tests/ on sys.path, so test modules import it as
`cli_cases`):

    COMMANDS                  every subcommand of `entropy-lens`
    ROOT, README, PAGES       the repository, its README, and every page with examples (the README and
                              docs/**/*.md, the site's build output left out)
    example_commands(text)    the `entropy-lens ...` commands of a text (continuations joined, comments cut,
                              `torchrun ... -m entropy_lens` read as `entropy-lens`, synopses left out)
    page_examples(page)       the commands of a page's bash blocks
    one_line_error(argv, capsys)  the CLI's one-line error for `argv` (exit status 2)
"""

import re
from pathlib import Path

from entropy_lens.cli import main

COMMANDS = (
    "scan",
    "sweep",
    "ppl",
    "passkey",
    "generate",
    "eval",
    "eval-table",
    "fit",
    "train-tiny",
    "search-heads",
    "figures",
    "view",
)

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
# every page with examples: the README and the site's Markdown (the build's output and copies left out)
PAGES = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]


def _joined(lines):
    """Lines with trailing-backslash continuations joined."""
    out, current = [], ""
    for line in lines:
        current += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            out.append(current.strip())
            current = ""
    return out


def example_commands(text: str) -> list[str]:
    found = []
    for line in _joined(text.splitlines()):
        line = line.split("  #")[0].split(" # ")[0].strip()
        if "-m entropy_lens " in line:  # torchrun ... -m entropy_lens scan ...
            line = "entropy-lens " + line.split("-m entropy_lens ", 1)[1]
        if line.startswith("entropy-lens ") and "[" not in line:  # "[--flag]" marks a synopsis
            found.append(line)
    return found


def page_examples(page: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [cmd for block in blocks for cmd in example_commands(block)]


def one_line_error(argv, capsys) -> str:
    """The CLI's answer to `argv`: exit status 2 and one line on stderr, returned."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("entropy-lens: error: ") and "Traceback" not in err
    return err
