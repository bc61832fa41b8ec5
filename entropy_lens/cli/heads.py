"""`entropy-lens search-heads`: per-head scales λ(h) with every weight frozen (the paper's §3.2)."""

from __future__ import annotations

import argparse

import numpy as np

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.monitor.settings import MonitorSettings
from entropy_lens.runs.output import OutputSettings

SEARCH_EXAMPLES = """examples:
  entropy-lens search-heads tiny-nope --len 512 --init 1.2 --data austen-minus:persuasion \\
      --out hs/tiny-nope-512.safetensors
  entropy-lens search-heads path/to/TinyLlama-NoPE-1.1B --len 8192 --init-from sweeps/nope-8k --device cuda \\
      --checkpointing --micro-batch 1 --out hs/hs8k.safetensors
  entropy-lens search-heads tiny-nope --len 256 --monitor entropy --out hs/tiny-nope-256.safetensors
      # + hs/tiny-nope-256.history.npz: each head's entropy at every step of the search
  entropy-lens scan path/to/TinyLlama-NoPE-1.1B --len 8192 --head-scales hs/hs8k.safetensors

Ctrl-C or SIGTERM keeps the last whole step in <out>.partial/; the same command resumes it exactly.
"""


def add_parsers(sub) -> None:
    from entropy_lens.runs.configs import HeadSearchConfig

    s = sub.add_parser(
        "search-heads",
        help="search per-head scales λ(h) with every weight frozen (an interrupted search resumes)",
        epilog=SEARCH_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(s, HeadSearchConfig)  # every field but init, which these two flags give
    init = s.add_mutually_exclusive_group()
    init.add_argument(
        "--init", type=float, default=None, help="initial multiplier of every head (default 1.0)"
    )
    init.add_argument(
        "--init-from",
        metavar="SWEEP_DIR",
        help="start from a sweep's best uniform scale for --len: the lowest mean loss over the last L/2 "
        "positions [len - L/2, len)",
    )
    add_settings(
        s,
        OutputSettings,
        ("out",),
        required=("out",),
        helps={"out": "output .safetensors (scale_param per layer) + .json beside it"},
    )
    s.add_argument("--partial", action="store_true", help="--init-from an unfinished sweep's finished scales")
    add_settings(
        s,
        MonitorSettings,
        helps={
            "monitor": "record these attention statistics (comma-separated: row statistics such as entropy, "
            "max_prob, and received, the first key's and the largest later key's share of attention) of "
            "every --monitor-every-th step's forwards, per head, into <out stem>.history.npz beside --out "
            "(replaced as --out is); the scales are bit-identical without it"
        },
    )
    add_settings(
        s,
        OutputSettings,
        ("force", "quiet"),
        helps={
            "force": "discard an interrupted search's checkpoint (<out>.partial/) and search from the start"
        },
    )
    s.set_defaults(func=cmd_search_heads)


def cmd_search_heads(args) -> int:
    from entropy_lens.runs.lock import OutputLock
    from entropy_lens.runs.output import check_file_target, save_or_rescue
    from entropy_lens.training.head_search import (
        check_monitor,
        check_out,
        history_path,
        save_head_scales,
        search_head_scales,
    )
    from entropy_lens.training.head_search_state import discard_checkpoint

    out = check_out(args.out, force=args.force)  # before any work
    monitor = config_from_args(MonitorSettings, args)
    if check_monitor(monitor):
        check_file_target(history_path(out), flag="--out", example="scales.safetensors")
    init = args.init if args.init is not None else 1.0
    if args.init_from:
        from entropy_lens.analysis import best_uniform_scale, load_sweep

        choice = best_uniform_scale(load_sweep(args.init_from, partial=args.partial), length=args.length)
        init = choice.scale
        a, b = choice.span
        edge = " (the sweep's edge scale: extend its scales to bracket the minimum)" if choice.at_edge else ""
        print(
            f"initial scale {init:g}: the lowest mean loss over positions [{a}, {b}) (the last L/2 of "
            f"--len) in {args.init_from}{edge}"
        )
    from entropy_lens.runs.configs import HeadSearchConfig

    config = config_from_args(HeadSearchConfig, args, init=init)
    config.check()
    with OutputLock(out):
        result = search_head_scales(
            config, progress=not args.quiet, monitor=monitor, out=out, force=args.force
        )  # continues an interrupted search's <out>.partial/ (training/head_search_state.py)
        save_or_rescue(out, lambda path: save_head_scales(result, path), what="head-scale search")
        discard_checkpoint(out)
    sc = result.scales
    print(
        f"{sc.size} head scales: min {sc.min():.3f}, median {np.median(sc):.3f}, max {sc.max():.3f} "
        f"(lower bound {config.lower_bound:g}); loss {result.log[0]['loss']:.3f} -> "
        f"{result.log[-1]['loss']:.3f}"
    )
    also = f", {history_path(out)}" if result.history is not None else ""
    print(f"wrote {out}{also} and {out}.json")
    return 0
