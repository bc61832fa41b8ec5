"""`entropy-lens passkey`: passkey retrieval (the paper's Figures 6, 8, 9), the needle's attention measured."""

from __future__ import annotations

import argparse

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.cli.scan import BUNDLED
from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.configs import VARIANTS, PasskeyConfig
from entropy_lens.runs.output import OutputSettings

PASSKEY_DESCRIPTION = """\
The Landmark-Attention task as the paper runs it: an instruction, a filler block repeated to the window
length, "The pass key is K. Remember it. K is the pass key." at --depths depths with --keys random
5-digit keys each, and "What is the pass key? The pass key is" at the end; greedy decoding of the
answer's tokens, exact match. Per trial it also records, per layer and head, the entropy of the answer's
query rows and the attention mass they put on the key's tokens (exact, the rows read whole).
--out is written after every (length, depth) cell; rerunning the same command continues it.
"""
PASSKEY_EXAMPLES = """examples:
  entropy-lens passkey tiny-nope --lens 128 256 512 --depths 10 --keys 10 --out results/passkey-nope.json
  entropy-lens passkey tiny-nope --lens 128 256 512 --head-scales hs/tiny-nope-512.safetensors --out hs.json
  entropy-lens passkey path/to/TinyLlama-NoPE-1.1B --nope --lens 1024 2048 4096 --device cuda --out p.json
"""


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "passkey",
        help="passkey retrieval accuracy by length and depth, with the needle's attention",
        description=PASSKEY_DESCRIPTION + "\n" + BUNDLED,
        epilog=PASSKEY_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(p, PasskeyConfig, exclusive=[VARIANTS])
    add_settings(
        p,
        OutputSettings,
        ("out", "force", "quiet"),
        required=("out",),
        helps={
            "out": "the results JSON (continued when rerun with the same flags)",
            "force": "overwrite an --out of other settings",
            "quiet": "no progress lines",
        },
    )
    p.add_argument(
        "--retrieval-heads",
        type=int,
        default=0,
        metavar="N",
        help="after the table, each length's N heads of the highest retrieval score (Wu et al.: the answer "
        "token's most probable key in the needle, holding the token written)",
    )
    p.set_defaults(func=cmd_passkey)


def cmd_passkey(args) -> int:
    from entropy_lens.runs.passkey import passkey

    if args.retrieval_heads < 0:
        raise EntropyLensError(
            f"--retrieval-heads must be at least 0 (got {args.retrieval_heads}); pass e.g. 5"
        )
    config = config_from_args(PasskeyConfig, args)
    record = passkey(config, out=args.out, force=args.force, progress=not args.quiet)
    print(table(record))
    if args.retrieval_heads:
        print(retrieval_table(record, args.retrieval_heads))
    print(f"wrote {args.out}")
    return 0


def table(record: dict) -> str:
    """Accuracy by depth (rows) and length (columns), and each length's mean."""
    lengths = sorted({c["length"] for c in record["results"]})
    depths = sorted({c["depth"] for c in record["results"]})
    cell = {(c["length"], c["depth"]): c["accuracy"] for c in record["results"]}
    lines = ["depth " + "".join(f"{w:>8}" for w in lengths)]
    lines += [f"{d:>5.0%} " + "".join(f"{cell[(w, d)]:>8.2f}" for w in lengths) for d in depths]
    means = [sum(cell[(w, d)] for d in depths) / len(depths) for w in lengths]
    lines.append("mean  " + "".join(f"{m:>8.2f}" for m in means))
    return "\n".join(lines)


def retrieval_table(record: dict, top: int) -> str:
    """Per length, the `top` heads of the highest mean retrieval score, as layer.head (score)."""
    import numpy as np

    from entropy_lens.analysis import retrieval_heads

    lines = ["retrieval heads (Wu et al.; mean over trials, the share of the needle's tokens retrieved):"]
    for length in sorted({c["length"] for c in record["results"]}):
        scores = retrieval_heads(record, length)
        order = np.argsort(-scores, axis=None, kind="stable")[:top]
        heads = ", ".join(
            f"{i // scores.shape[1]}.{i % scores.shape[1]} ({scores.flat[i]:.3f})" for i in order
        )
        lines.append(f"  {length:>6}: {heads}")
    return "\n".join(lines)
