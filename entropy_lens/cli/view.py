"""`entropy-lens view`: results files, sweeps, monitor histories and generations as one self-contained,
interactive HTML page."""

from __future__ import annotations

import argparse
import dataclasses

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.runs.output import OutputSettings

VIEW_EXAMPLES = """examples:
  entropy-lens view results/demo.npz --out report.html
  entropy-lens view nope.npz rope.npz --labels NoPE RoPE --out compare.html
  entropy-lens view sw/nope --out sweep.html                # a sweep folder: loss by scale, the fit
  entropy-lens view attention.npz --out history.html        # a monitor history: statistics by step × head
  entropy-lens view gen.npz --out gen.html                  # a generation: each generated token's statistics
"""


def add_parsers(sub) -> None:
    from entropy_lens.view.config import ViewConfig

    v = sub.add_parser(
        "view",
        help="an interactive page of results, sweeps, monitor histories and generations (one HTML file, "
        "offline)",
        description="Heat map of a per-head statistic, each head's entropy by position on click, "
        "differences of two results, a sweep's loss by scale and its fit, a monitor history's statistics by "
        "training step × head, a generation's text with each generated token's statistic of a chosen head "
        "(hover a token: its span masses and top keys): one HTML file with plotly.js "
        "inlined, no network needed.",
        epilog=VIEW_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument(
        "results",
        nargs="+",
        metavar="RESULT",
        help="a results .npz, a sweep folder, a monitor history (AttentionMonitor.save; a "
        "train-tiny --monitor output folder), or a generation (entropy-lens generate --out)",
    )
    add_settings(v, ViewConfig)
    add_settings(
        v,
        OutputSettings,
        ("out",),
        defaults={"out": "view.html"},
        helps={"out": "the HTML file to write, replaced if it exists"},
    )
    v.set_defaults(func=cmd_view)


def cmd_view(args) -> int:
    from entropy_lens.runs.output import check_file_target, save_or_rescue
    from entropy_lens.view import view
    from entropy_lens.view.config import ViewConfig

    config = config_from_args(ViewConfig, args)
    out = check_file_target(args.out, example="view.html")
    page = view(args.results, **dataclasses.asdict(config))
    save_or_rescue(out, page.save, what="page")  # a full disk: the page is kept elsewhere, said in one line
    print(f"wrote {out} ({len(page.html.encode()) / 1e6:.1f} MB); open it in a browser, no network needed")
    return 0
