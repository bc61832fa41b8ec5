"""Every example command in `--help`, in the README and in the documentation's pages (docs/**/*.md)
parses, and its settings pass the same checks a run makes first (a dry run: no model is loaded).
Examples that name checkpoints or files this machine does not have are checked up to those paths."""

import dataclasses
import shlex

import pytest
from cli_cases import COMMANDS, PAGES, README, ROOT, example_commands, page_examples

from entropy_lens.cli import build_parser


def _help_examples() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return [cmd for p in sub.choices.values() for cmd in example_commands(p.epilog or "")]


def _readme_examples() -> list[str]:
    return page_examples(README)


def _docs_examples() -> list[str]:
    return [cmd for page in PAGES[1:] for cmd in page_examples(page)]


EXAMPLES = sorted(set(_help_examples()) | set(_readme_examples()) | set(_docs_examples()))


def test_examples_were_found():
    commands = {cmd.split()[1] for cmd in EXAMPLES}
    assert commands == set(COMMANDS)  # every command has an example
    assert len(_help_examples()) >= 12 and len(_readme_examples()) >= 3 and len(_docs_examples()) >= 10


def test_every_guide_with_a_command_block_is_read():
    """The guides are where the examples moved: each page's bash blocks are among the examples."""
    pages = [p.relative_to(ROOT).as_posix() for p in PAGES if page_examples(p)]
    for page in ("README.md", "docs/guides/scanning.md", "docs/guides/passkey.md", "docs/guides/sweeps.md"):
        assert page in pages, page
    assert set(page_examples(ROOT / "docs" / "guides" / "passkey.md")) <= set(EXAMPLES)


def test_a_passkey_example_with_head_scales_follows_the_command_that_writes_them():
    """A pasted guide runs top to bottom: a `--head-scales F` file is written by an earlier
    `search-heads --out F` on the same page (or the README)."""
    for page in PAGES:
        written = set()
        for cmd in page_examples(page):
            words = shlex.split(cmd)
            if words[1] == "search-heads" and "--out" in words:
                written.add(words[words.index("--out") + 1])
            if words[1] in ("passkey", "scan") and "--head-scales" in words and page.name != "lm-eval.md":
                used = words[words.index("--head-scales") + 1]
                assert used in written, f"{page.name}: {cmd} reads {used} before search-heads writes it"


def test_the_commands_of_a_page_write_distinct_files():
    """A page pasted top to bottom runs (issue 80 item 3: the generation guide's two commands both wrote
    gen.npz, the second refused with "already exists"): no command writes an --out an earlier command of
    the same page wrote, unless it says --force or --resume."""
    for page in PAGES:
        written = {}
        for cmd in page_examples(page):
            words = shlex.split(cmd)
            if "--out" not in words:
                continue
            out = words[words.index("--out") + 1]
            again = "--force" in words or "--resume" in words
            assert again or out not in written, f"{page.name}: {cmd} writes {out}, as {written.get(out)} did"
            written[out] = cmd


def test_the_readme_scans_the_bundled_real_model():
    assert any(cmd.startswith("entropy-lens scan smollm2 ") for cmd in _readme_examples())


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
    elif args.command == "generate":
        from entropy_lens.runs.generate import GenerateConfig

        config_from_args(GenerateConfig, args).check()
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
