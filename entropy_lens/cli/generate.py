"""`entropy-lens generate`: the row statistics of every token a model writes after a prompt."""

from __future__ import annotations

import argparse

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.cli.scan import BUNDLED
from entropy_lens.runs.output import OutputSettings

GENERATE_DESCRIPTION = """\
The model writes --max-new-tokens tokens after the prompt (greedy, or --sample with --seed), and each
generated token's attention row is measured per layer and head (the row whose logits chose it), exactly,
without T x T: --stats row statistics into one .npz (GenerationResult.load reads it; numpy opens it).
Prints the text written and per layer each statistic's mean, lowest and highest head.
"""
GENERATE_EXAMPLES = """examples:
  entropy-lens generate tiny-nope --data austen:emma --prompt-len 128 --max-new-tokens 16 --out gen.npz
  entropy-lens generate tiny-nope --data austen:emma --prompt-len 512 --stats entropy,varentropy --out g.npz
"""


def add_parsers(sub) -> None:
    from entropy_lens.runs.generate import GenerateConfig

    p = sub.add_parser(
        "generate",
        help="statistics of every generated token's attention row",
        description=GENERATE_DESCRIPTION + "\n" + BUNDLED,
        epilog=GENERATE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(p, GenerateConfig)
    add_settings(
        p,
        OutputSettings,
        ("out", "force"),
        required=("out",),
        helps={
            "out": "the .npz of every generated token's statistics",
            "force": "overwrite an existing --out",
        },
    )
    p.set_defaults(func=cmd_generate)


def cmd_generate(args) -> int:
    from entropy_lens.runs.generate import GenerateConfig, generate, head_summary

    config = config_from_args(GenerateConfig, args)
    result = generate(config, out=args.out, force=args.force)
    print(head_summary(result))
    print(f"wrote {args.out}")
    return 0
