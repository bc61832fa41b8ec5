"""`entropy-lens ppl`: sliding-window perplexity at several window lengths (the paper's Table 2)."""

from __future__ import annotations

import argparse

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.cli.scan import BUNDLED
from entropy_lens.runs.configs import VARIANTS, PerplexityConfig
from entropy_lens.runs.output import OutputSettings

PPL_DESCRIPTION = """\
Windows of W tokens start every S tokens of --data, and only each window's last S tokens are scored
(Press et al. 2022): every scored token sees at least W - S tokens of context and none is scored twice.
PPL = exp(mean NLL) over --samples windows per length, with a 95% interval from the token-level
standard error (which ignores correlation within a window: a lower bound on the uncertainty).
"""
PPL_EXAMPLES = """examples:
  entropy-lens ppl tiny-nope --lens 128 256 512 1024 --stride 16 --samples 256 --out results/ppl-nope.json
  entropy-lens ppl tiny-nope --lens 128 256 512 1024 --scale 1.2 --threads 1   # stride L/8 = 16 by default
  entropy-lens ppl tiny-rope --lens 128 256 512 1024 --rope-scaling dynamic:2
  entropy-lens ppl path/to/TinyLlama-NoPE-1.1B --nope --lens 2048 4096 8192 16384 --stride 256 --device cuda
"""


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "ppl",
        help="sliding-window perplexity at several window lengths (the paper's Table 2)",
        description=PPL_DESCRIPTION + "\n" + BUNDLED,
        epilog=PPL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(p, PerplexityConfig, exclusive=[VARIANTS])
    add_settings(
        p,
        OutputSettings,
        ("out", "quiet"),
        helps={
            "out": "write the table, its settings and provenance to this JSON file",
            "quiet": "no progress lines",
        },
    )
    p.set_defaults(func=cmd_ppl)


def cmd_ppl(args) -> int:
    import contextlib
    import json

    from entropy_lens.results import atomic_write_text
    from entropy_lens.runs.distributed import world
    from entropy_lens.runs.lock import OutputLock
    from entropy_lens.runs.output import check_file_target, save_or_rescue
    from entropy_lens.runs.perplexity import perplexity, perplexity_record

    config = config_from_args(PerplexityConfig, args)
    config.check()  # every flag before the model loads, and before --out is touched
    out = None if args.out is None else check_file_target(args.out, example="ppl.json")
    main = world().main  # under torchrun rank 0 alone writes and reports
    with OutputLock(out) if out is not None and main else contextlib.nullcontext():
        config = config.resolved()
        rows = perplexity(config, progress=not args.quiet)
        if not main:
            return 0
        print(table(config, rows))
        if out is not None:
            text = json.dumps(perplexity_record(config, rows, out), indent=1, sort_keys=True) + "\n"
            save_or_rescue(out, lambda path: atomic_write_text(path, text), what="perplexity table")
            print(f"wrote {out}")
    return 0


def table(config, rows: dict[int, dict]) -> str:
    """The printed table: one line per window length W (and W as a multiple of the training length L)."""
    import math

    S = config.stride
    head = f"{config.model} on {config.data}: windows of W tokens every {S}, the last {S} scored; "
    lines = [
        head + f"{config.samples} window{'s' * (config.samples != 1)} per length",
        f"{'W':>8}{'W/L':>6}{'scored':>10}{'NLL (nats)':>20}{'PPL':>11}  95% interval",
    ]
    for length, row in rows.items():
        w, L = row["ppl"], row["result"].meta.get("train_len")
        ratio = f"{length / L:g}" if isinstance(L, int) and L > 0 else "-"
        if math.isfinite(w.stderr):
            nll, interval = f"{w.nll:.4f} ± {w.stderr:.4f}", f"[{w.ppl_low:.4g}, {w.ppl_high:.4g}]"
        else:
            nll, interval = f"{w.nll:.4f}", "undefined: one window per position (pass --samples 2 or more)"
        lines.append(f"{length:>8}{ratio:>6}{w.n_tokens:>10,}{nll:>20}{w.ppl:>11.4g}  {interval}")
    lines.append("interval: token-level standard error, ignoring correlation within a window (a lower bound)")
    return "\n".join(lines)
