"""`entropy-lens train-tiny`: the project's tiny NoPE/RoPE pair (every recipe field is a flag)."""

from __future__ import annotations

import argparse

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.monitor.settings import MonitorSettings
from entropy_lens.runs.output import OutputSettings
from entropy_lens.training.recipe import TinyRecipe

TRAIN_EXAMPLES = """examples:
  entropy-lens train-tiny --kind nope --out tiny-nope
  entropy-lens train-tiny --kind rope --out tiny-rope --resume
  entropy-lens train-tiny --kind nope --train-len 256 --steps 3000 --out tiny-nope-256
  entropy-lens train-tiny --kind nope --monitor entropy,max_prob --out tiny-nope   # + attention-history.npz
  entropy-lens train-tiny --kind nope --snapshot 300 --out tiny-nope   # also tiny-nope/step-300/
  entropy-lens train-tiny --kind nope --passkey-share 0.5 --passkey-steps 200 --init-from tiny-nope --out tiny-nope-pk
"""


def add_parsers(sub) -> None:
    t = sub.add_parser(
        "train-tiny",
        help="train the tiny NoPE/RoPE model pair on the bundled corpus",
        epilog=TRAIN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(t, TinyRecipe, required=("kind",))  # every recipe field is a flag, same name and default
    add_settings(
        t, OutputSettings, ("out",), helps={"out": "output Hugging Face folder (default tiny-<kind>)"}
    )
    t.add_argument(
        "--snapshot",
        type=int,
        action="append",
        default=[],
        metavar="STEP",
        help="also save the model after STEP steps as <out>/step-STEP/ (repeatable)",
    )
    t.add_argument(
        "--init-from",
        metavar="FOLDER",
        help="a model trained by this recipe without the passkey phase (its flags minus the --passkey-* "
        "ones): start the passkey phase from its weights instead of retraining them",
    )
    add_settings(
        t,
        MonitorSettings,
        helps={
            "monitor": "record these attention statistics (comma-separated: row statistics such as entropy, "
            "max_prob, and received, the first key's and the largest later key's share of attention) of "
            "every --monitor-every-th step's forward, per head, into <out>/attention-history.npz; the "
            "weights are bit-identical without it"
        },
    )
    add_settings(
        t,
        OutputSettings,
        ("resume", "force", "quiet"),
        exclusive=[("resume", "force")],
        helps={"resume": "continue an interrupted run from its checkpoint"},
    )
    t.set_defaults(func=cmd_train_tiny)


def cmd_train_tiny(args) -> int:
    from entropy_lens.training import train_tiny
    from entropy_lens.training.training_record import read_training_record

    recipe = config_from_args(TinyRecipe, args)
    out = train_tiny(
        recipe,
        args.out or f"tiny-{args.kind}",
        resume=args.resume,
        force=args.force,
        progress=not args.quiet,
        snapshots=tuple(args.snapshot),
        init_from=args.init_from,
        monitor=config_from_args(MonitorSettings, args),
    )
    facts = read_training_record(out)
    print(
        f"tiny-{args.kind}: {facts['parameters']:,} parameters, {recipe.total_steps} steps of {recipe.batch} x "
        f"{recipe.train_len} tokens in {facts['wall_s'] / 60:.1f} min; final train loss "
        f"{facts['final_train_loss_mean_last_50']:.3f} nats (mean of the last {min(50, recipe.total_steps)} steps)"
    )
    print(f"wrote {out}" + "".join(f", {out}/step-{n}" for n in args.snapshot))
    if args.monitor:
        print(f"wrote {out}/attention-history.npz (--monitor {args.monitor})")
    return 0
