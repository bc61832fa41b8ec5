"""`entropy-lens scan` and `entropy-lens sweep`."""

from __future__ import annotations

import argparse

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.models.bundled import BUNDLED_MODELS
from entropy_lens.runs.output import OutputSettings

BUNDLED = f"bundled models (CKPT): {', '.join(BUNDLED_MODELS)}"

SCAN_EXAMPLES = """examples:
  entropy-lens scan AntNLP/TinyLlama-NoPE-1.1B --nope --len 16384 --device cuda   # Hub id, via the HF cache
  entropy-lens scan tiny-nope --len 512 --data austen:persuasion --samples 64
  entropy-lens scan path/to/TinyLlama-NoPE-1.1B --nope --len 16384 --samples 8 --device cuda --scale 1.2
  entropy-lens scan path/to/TinyLlama-NoPE-HeadScale8k --len 8192 --device cuda   # reads scale_param
  entropy-lens scan model.gguf --len 4096 --data notes/ --out results/notes.npz --resume
"""
SWEEP_EXAMPLES = """examples:
  entropy-lens sweep tiny-nope --len 512 --data austen:persuasion --samples 64 --scales 0.9:1.8:0.05 --out sw/
  entropy-lens sweep path/to/TinyLlama-NoPE-1.1B --nope --len 16384 --scales 1.0:2.0:0.01 --device cuda \\
      --record none --out sweeps/nope50k --resume
"""


def add_parsers(sub) -> None:
    from entropy_lens.runs.configs import SWEEP_ENTROPY, ScanConfig

    p = sub.add_parser(
        "scan",
        help="per-layer, per-head, per-position attention entropy and loss",
        description=BUNDLED,
        epilog=SCAN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(p, ScanConfig, exclusive=[("scale", "head_scales")])
    _add_output(p, "scan", "results .npz (default results/<model>-len<N>.npz)")
    p.set_defaults(func=cmd_scan)

    w = sub.add_parser(
        "sweep",
        help="one scan per uniform scale multiplier s, into a folder",
        description=BUNDLED,
        epilog=SWEEP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(w, ScanConfig, exclude=("scale", "head_scales", "entropy"))
    w.add_argument("--scales", required=True, help="start:stop:step (stop included) or a comma list of s")
    add_settings(  # a sweep's own default: its scale files are ~1/heads the size
        w,
        ScanConfig,
        ("entropy",),
        defaults={"entropy": SWEEP_ENTROPY},
        helps={
            "entropy": "what each scale's scan records of every statistic: each head's (heads), the mean "
            "over each layer's heads (mean, the default: ~1/heads the size), or nothing (none)"
        },
    )
    _add_output(w, "sweep", "sweep folder (sweep.json + one results file per scale)", required=("out",))
    w.set_defaults(func=cmd_sweep)


def _add_output(p, what: str, out: str, required: tuple[str, ...] = ()) -> None:
    """--out (`out`: what it is), --resume | --force and --quiet of a scan or a sweep (`what`)."""
    add_settings(
        p,
        OutputSettings,
        ("out", "resume", "force", "quiet"),
        exclusive=[("resume", "force")],
        required=required,
        helps={"out": out, "resume": f"finish an interrupted {what} (or reuse a finished one)"},
    )


def cmd_scan(args) -> int:
    from entropy_lens.results import summary
    from entropy_lens.runs.configs import ScanConfig
    from entropy_lens.runs.distributed import world
    from entropy_lens.runs.scan import default_out, scan

    config = config_from_args(ScanConfig, args)
    out = args.out or default_out(config)
    result = scan(config, out=out, resume=args.resume, force=args.force, progress=not args.quiet)
    if not world().main:
        return 0  # under torchrun rank 0 alone wrote the file and reports
    m = result.meta
    print(
        f"{m['model']}: {m['n_layers']} layers x {m['n_heads']} heads, len {m['length']}, {m['samples']} "
        "samples "
        f"of {m['data']}, {m['device']}/{m['dtype']}, threads {m['threads']}, backend {m['backend']} "
        f"({m.get('attention_path', 'separate')}), "
        f"{m['wall_time_s']:.1f} s"
    )
    print(summary(result))
    profile = profile_of(result)
    if profile is not None:
        print(f"\n{profile.table()}")
    print(f"wrote {out}")
    return 0


def profile_of(result):
    """The scan's head profile (analysis.head_profile: sink, local and distant attention per KV head) where
    it recorded first_mass and recent_mass per head over windows long enough to have distant keys."""
    from entropy_lens.analysis import head_profile
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.statistics import FIRST_MASS, RECENT_MASS

    if (
        not {FIRST_MASS.name, RECENT_MASS.name} <= set(result.stat_names)
        or result.entropy_reduction != "heads"
    ):
        return None
    try:
        return head_profile(result)
    except EntropyLensError:  # windows too short for distant keys: the summary's columns say the rest
        return None


def cmd_sweep(args) -> int:
    from entropy_lens.runs.configs import ScanConfig
    from entropy_lens.runs.distributed import world
    from entropy_lens.runs.sweep import parse_scales, sweep

    scales = parse_scales(args.scales)
    out = sweep(
        config_from_args(ScanConfig, args),
        scales,
        args.out,
        resume=args.resume,
        force=args.force,
        progress=not args.quiet and world().main,
    )
    if not world().main:
        return 0  # under torchrun (--context-parallel) rank 0 alone wrote the folder and reports
    print(f"wrote {len(scales)} scans (s = {scales[0]:g} .. {scales[-1]:g}) and {out / 'sweep.json'}")
    return 0
