"""Every example command in `--help` and in the README parses, and its settings pass the same checks a
run makes first (a dry run: no model is loaded). Examples that name checkpoints or files this machine
does not have are checked up to those paths."""

import dataclasses
import re
import shlex
from pathlib import Path

import pytest
from test_cli import COMMANDS

from entropy_lens.cli import build_parser

README = Path(__file__).parent.parent / "README.md"


def _joined(lines):
    """Lines with trailing-backslash continuations joined."""
    out, current = [], ""
    for line in lines:
        current += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            out.append(current.strip())
            current = ""
    return out


def _commands(text: str) -> list[str]:
    found = []
    for line in _joined(text.splitlines()):
        line = line.split("  #")[0].split(" # ")[0].strip()
        if "-m entropy_lens " in line:  # torchrun ... -m entropy_lens scan ...
            line = "entropy-lens " + line.split("-m entropy_lens ", 1)[1]
        if line.startswith("entropy-lens ") and "[" not in line:  # "[--flag]" marks a synopsis
            found.append(line)
    return found


def _help_examples() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return [cmd for p in sub.choices.values() for cmd in _commands(p.epilog or "")]


def _readme_examples() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.DOTALL)
    return [cmd for block in blocks for cmd in _commands(block)]


EXAMPLES = sorted(set(_help_examples()) | set(_readme_examples()))


def test_examples_were_found():
    commands = {cmd.split()[1] for cmd in EXAMPLES}
    assert commands == set(COMMANDS)  # every command has an example
    assert len(_help_examples()) >= 12 and len(_readme_examples()) >= 10


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_parses_and_its_settings_check(example):
    from entropy_lens.cli.options import config_from_args
    from entropy_lens.runs import HeadSearchConfig, PerplexityConfig, ScanConfig
    from entropy_lens.runs.configs import PasskeyConfig
    from entropy_lens.training import TinyRecipe

    args = build_parser().parse_args(shlex.split(example)[1:])
    if args.command in ("scan", "sweep"):
        extra = {"entropy": args.entropy} if args.command == "sweep" else {}
        config = config_from_args(ScanConfig, args, **extra)
        if config.head_scales is not None:  # a file an earlier example writes
            config = dataclasses.replace(config, head_scales=None)
        config.check()
        if args.command == "sweep":
            from entropy_lens.runs.sweep import parse_scales

            parse_scales(args.scales)
    elif args.command == "ppl":
        config_from_args(PerplexityConfig, args).check()
    elif args.command == "passkey":
        config = config_from_args(PasskeyConfig, args)
        dataclasses.replace(config, head_scales=None).check()  # a file an earlier example writes
    elif args.command == "eval":
        from entropy_lens.harness.config import EvalConfig

        config = config_from_args(EvalConfig, args)  # files and folders of the user's: not here
        dataclasses.replace(config, head_scales=None, include_path=None).check()
    elif args.command == "eval-table":
        assert args.table in ("1", "3") and args.results  # reads results files earlier examples write
    elif args.command == "train-tiny":
        config_from_args(TinyRecipe, args).check()
    elif args.command == "search-heads":
        config_from_args(HeadSearchConfig, args, init=args.init or 1.0).check()
    elif args.command == "figures":
        from entropy_lens.cli.figures import figures_config

        figures_config(args)  # reads --config (the packaged paper.yaml for `paper`)
    elif args.command == "view":
        from entropy_lens.view.config import ViewConfig

        config_from_args(ViewConfig, args)  # reads results and sweeps earlier examples write
        assert args.results and args.out.endswith(".html")
    else:
        assert args.command == "fit" and args.sweep  # reads a sweep an earlier example writes
