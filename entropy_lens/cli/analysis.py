"""`entropy-lens fit`: the paper's λ = (1 + a ln(i/L))/√d fit to a sweep's best scale per position."""

from __future__ import annotations

import argparse
import json
import sys

FIT_EXAMPLES = """examples:
  entropy-lens fit sweeps/nope50k                    # L from the model's config (train_len)
  entropy-lens fit sweeps/nope50k --train-len 2048 --json
"""


def add_parsers(sub) -> None:
    f = sub.add_parser(
        "fit",
        help="fit s = 1 + a ln(i/L) to a sweep's best scale per position",
        epilog=FIT_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    f.add_argument("sweep", metavar="SWEEP_DIR", help="folder written by `entropy-lens sweep`")
    f.add_argument("--train-len", type=int, help="training length L (default: recorded in the sweep's scans)")
    f.add_argument("--from", dest="start", type=int, help="first position of the fit (default L)")
    f.add_argument("--to", dest="stop", type=int, help="end of the fit, exclusive (default len)")
    f.add_argument(
        "--smooth",
        type=int,
        default=0,
        metavar="W",
        help="moving-average half-width applied to each loss curve before the argmin (default 0: raw, "
        "as the paper; try 25 for sweeps of few samples)",
    )
    f.add_argument(
        "--partial",
        action="store_true",
        help="fit an unfinished sweep's finished scales (default: refuse, naming the missing scales)",
    )
    f.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    f.set_defaults(func=cmd_fit)


def cmd_fit(args) -> int:
    from entropy_lens.analysis import fit_scale_curve, grid_edge_problem, load_sweep, yarn_scale
    from entropy_lens.results import printable

    sweep = load_sweep(args.sweep, partial=args.partial)
    if sweep.missing:
        print(
            f"entropy-lens: note: unfinished sweep, fitting the {len(sweep.scales)} scales done "
            f"({len(sweep.missing)} missing)",
            file=sys.stderr,
        )
    fit_range = None
    if args.start is not None or args.stop is not None:
        L = args.train_len or sweep.train_len or 0
        fit_range = (
            args.start if args.start is not None else L,
            args.stop if args.stop is not None else sweep.length,
        )
    fit = fit_scale_curve(sweep, train_len=args.train_len, fit_range=fit_range, smooth=args.smooth)
    implied = fit.implied((2, 4, 8))
    if args.json:
        record = {
            "a": fit.a,
            "a_stderr": fit.a_stderr,
            "r2": fit.r2,
            "train_len": fit.train_len,
            "n_points": fit.n_points,
            "fit_range": list(fit.fit_range),
            "model": sweep.model,
            "length": sweep.length,
            "smooth": args.smooth,
            "scales": [float(s) for s in sweep.scales],
            "missing_scales": sweep.missing,
            "at_edge": {"lower": fit.at_edge[0], "upper": fit.at_edge[1]},
            "implied": {f"{k}x": v for k, v in implied.items()},
            "yarn": {f"{k}x": yarn_scale(k) for k in implied},
        }
        print(json.dumps(record))
        return 0
    print(
        f"{printable(sweep.model)}: {len(sweep.scales)} scales {sweep.scales[0]:g}..{sweep.scales[-1]:g}, len "
        f"{sweep.length}"
    )
    print(
        f"s = 1 + a ln(i/L), L = {fit.train_len}, fit over [{fit.fit_range[0]}, {fit.fit_range[1]}) "
        f"({fit.n_points} positions)" + (f", loss smoothed ±{args.smooth}" if args.smooth else "")
    )
    print(f"a = {fit.a:.4f} ± {fit.a_stderr:.4f}   R² = {fit.r2:.4f}")
    problem = grid_edge_problem(fit)
    if problem:
        print(f"note: {problem}")
    print("implied multiplier:  " + "  ".join(f"{k}L: {v:.3f}" for k, v in implied.items()))
    print("YaRN (1+0.1 ln k)²:  " + "  ".join(f"{k}L: {yarn_scale(k):.3f}" for k in implied))
    return 0
