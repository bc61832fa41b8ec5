"""`entropy-lens figures [ITEM ...]`: the paper's figures and tables (every one, or those named) from
cached, resumable runs."""

from __future__ import annotations

import argparse

from entropy_lens.cli.options import add_settings, settings_from_args
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.pipeline import CACHE
from entropy_lens.runs.output import OutputSettings

FIGURES_EXAMPLES = """examples:
  entropy-lens figures                                   # the embedded tiny pair (figures/README.md: how long)
  entropy-lens figures --cached-only --out /tmp/figures   # redraw from the committed runs, run nothing
  entropy-lens figures 17 table-02 --cached-only          # just these, from just their runs; their README sections
  entropy-lens figures --list                            # every figure and table, one line each
  entropy-lens figures --config paper --out figures/paper   # the packaged paper.yaml; copy it to set paths
  entropy-lens figures --nope-ckpt TinyLlama-NoPE-1.1B --rope-ckpt tinyLlama-step-50k \\
      --head-scale-ckpt TinyLlama-NoPE-HeadScale8k --train-len 2048 --len 16384 --device cuda \\
      --data corpus.jsonl
"""


def add_parsers(sub) -> None:
    f = sub.add_parser(
        "figures",
        help="regenerate the paper's figures (PNG + PDF + README.md)",
        epilog=FIGURES_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    f.add_argument(
        "items",
        nargs="*",
        metavar="ITEM",
        help="figures or tables to draw, by number (17) or stem (figure-17, table-02): only the runs they "
        "read are resolved and only their sections of README.md rewritten (default: every one)",
    )
    f.add_argument(
        "--list", action="store_true", help="print every figure and table, one line each, and exit"
    )
    f.add_argument(
        "--config",
        help="YAML file of settings (field names of entropy_lens.figures.config.FiguresConfig), or `paper` for the "
        "packaged paper.yaml",
    )
    add_settings(
        f,
        OutputSettings,
        ("out",),
        defaults={"out": "figures"},
        helps={"out": "folder for figure-NN.png/.pdf and README.md (default figures)"},
    )
    f.add_argument(
        "--cache",
        default=CACHE,
        help=f"folder for the scans, sweeps and head scales (default {CACHE}: the runs behind the committed "
        "figures)",
    )
    f.add_argument(
        "--cached-only",
        action="store_true",
        help="run nothing: redraw from the cache, and name any run it lacks",
    )
    add_settings(f, FiguresConfig, as_overrides=True)  # each given flag overrides --config's value
    add_settings(f, OutputSettings, ("quiet",), helps={"quiet": "no progress output"})
    f.set_defaults(func=cmd_figures)


def figures_config(args):
    """The FiguresConfig of --config (a file, or `paper`) and the flags, which take precedence."""
    overrides = settings_from_args(FiguresConfig, args)
    if args.config:
        return FiguresConfig.from_file(args.config, **overrides)
    return FiguresConfig.build({}, source="flags", **overrides)


def cmd_figures(args) -> int:
    from entropy_lens.figures.registry import items, summary

    if args.list:
        for item in items():
            print(f"{item.stem}  {summary(item)}")
        return 0
    import matplotlib

    matplotlib.use("Agg")  # files only: no window, no display needed

    from entropy_lens.figures.pipeline import make_figures

    config = figures_config(args)
    make_figures(
        config,
        args.out,
        cache=args.cache,
        progress=not args.quiet,
        cached_only=args.cached_only,
        only=args.items or None,
    )
    return 0
