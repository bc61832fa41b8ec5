"""`entropy-lens figures`: Figures 1–5, 7 and 10–12 of the paper from cached, resumable runs."""

from __future__ import annotations

import argparse

from entropy_lens.runs.figures import CACHE

FIGURES_EXAMPLES = """examples:
  entropy-lens figures                                   # the embedded tiny pair (figures/README.md: how long)
  entropy-lens figures --cached-only --out /tmp/figures   # redraw from the committed runs, run nothing
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
        "--config",
        help="YAML file of settings (field names of entropy_lens.runs.FiguresConfig), or `paper` for the "
        "packaged paper.yaml",
    )
    f.add_argument(
        "--out", default="figures", help="folder for figure-NN.png/.pdf and README.md (default figures)"
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
    f.add_argument("--nope-ckpt", dest="nope", help="NoPE checkpoint (default tiny-nope)")
    f.add_argument("--rope-ckpt", dest="rope", help="its RoPE twin (default tiny-rope)")
    f.add_argument(
        "--early-ckpt",
        dest="early",
        help="an early checkpoint of the NoPE model's run, Figure 7's left panel (default tiny-nope-step300)",
    )
    f.add_argument(
        "--head-scale-ckpt",
        dest="head_scales",
        help="searched λ(h) for the NoPE model at 4L (default: search them)",
    )
    f.add_argument("--train-len", type=int, help="training length L (default: the NoPE checkpoint's)")
    f.add_argument("--len", dest="length", type=int, help="Figure 7's sweep length (default 8L)")
    f.add_argument("--data", help="evaluation text (default austen:persuasion)")
    f.add_argument("--samples", type=int, help="windows per scan (default 128)")
    f.add_argument("--device", help="cpu, cuda, ... (default auto)")
    f.add_argument("--quiet", action="store_true", help="no progress output")
    f.set_defaults(func=cmd_figures)


def figures_config(args):
    """The FiguresConfig of --config (a file, or `paper`) and the flags, which take precedence."""
    from entropy_lens.runs.figures import FiguresConfig

    overrides = {
        k: getattr(args, k)
        for k in ("nope", "rope", "early", "head_scales", "train_len", "length", "data", "samples", "device")
    }
    if args.config:
        return FiguresConfig.from_file(args.config, **overrides)
    return FiguresConfig.build({}, source="flags", **overrides)


def cmd_figures(args) -> int:
    import matplotlib

    matplotlib.use("Agg")  # files only: no window, no display needed

    from entropy_lens.runs.figures import make_figures

    config = figures_config(args)
    make_figures(config, args.out, cache=args.cache, progress=not args.quiet, cached_only=args.cached_only)
    return 0
