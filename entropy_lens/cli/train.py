"""`entropy-lens train-tiny`: the project's tiny NoPE/RoPE pair (every recipe field is a flag)."""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np

from entropy_lens.training.tiny import TinyRecipe

TRAIN_EXAMPLES = """examples:
  entropy-lens train-tiny --kind nope --out tiny-nope        # ~16 min on 2 CPU cores
  entropy-lens train-tiny --kind rope --out tiny-rope --resume
  entropy-lens train-tiny --kind nope --train-len 256 --steps 3000 --out tiny-nope-256
"""


def add_parsers(sub) -> None:
    t = sub.add_parser("train-tiny", help="train the tiny NoPE/RoPE model pair on the bundled corpus",
                       epilog=TRAIN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    t.add_argument("--kind", required=True, choices=["nope", "rope"], help="position encoding")
    t.add_argument("--out", help="output Hugging Face folder (default tiny-<kind>)")
    for field in dataclasses.fields(TinyRecipe):  # every recipe field is a flag, same name and default
        if field.name != "kind":
            flag = "--" + field.name.replace("_", "-")
            t.add_argument(flag, type=type(field.default), default=field.default, help=f"(default {field.default})")
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue an interrupted run from its checkpoint")
    mode.add_argument("--force", action="store_true", help="overwrite an existing --out")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train_tiny)
    add_search_parser(sub)


def cmd_train_tiny(args) -> int:
    from transformers.utils import logging as hf_logging

    from entropy_lens.training import train_tiny

    hf_logging.disable_progress_bar()
    recipe = TinyRecipe(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TinyRecipe)})
    out = train_tiny(recipe, args.out or f"tiny-{args.kind}", resume=args.resume, force=args.force,
                     progress=not args.quiet)  # fmt: skip
    facts = json.loads((out / "training.json").read_text())
    print(f"tiny-{args.kind}: {facts['parameters']:,} parameters, {recipe.steps} steps of {recipe.batch} x "
          f"{recipe.train_len} tokens in {facts['wall_s'] / 60:.1f} min; final train loss "
          f"{facts['final_train_loss_mean_last_50']:.3f} nats (mean of the last 50 steps)")  # fmt: skip
    print(f"wrote {out}")
    return 0


SEARCH_EXAMPLES = """examples:
  entropy-lens search-heads tiny-nope --len 512 --init 1.2 --data austen-minus:persuasion --out hs/tiny-nope-512.safetensors
  entropy-lens search-heads path/to/TinyLlama-NoPE-1.1B --len 8192 --init-from sweeps/nope-8k --device cuda \\
      --checkpointing --micro-batch 1 --out hs/hs8k.safetensors
  entropy-lens scan path/to/TinyLlama-NoPE-1.1B --len 8192 --head-scales hs/hs8k.safetensors
"""


def add_search_parser(sub) -> None:
    from entropy_lens.head_search import HeadSearchConfig

    d = {f.name: f.default for f in dataclasses.fields(HeadSearchConfig) if f.name not in ("model", "length")}
    s = sub.add_parser("search-heads", help="search per-head scales λ(h) with every weight frozen",
                       epilog=SEARCH_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    s.add_argument("model", metavar="CKPT", help="Hugging Face folder, .gguf file, or bundled name")
    s.add_argument("--len", dest="length", type=int, required=True, help="L', tokens per training window")
    init = s.add_mutually_exclusive_group()
    init.add_argument("--init", type=float, default=None, help="initial multiplier of every head (default 1.0)")
    init.add_argument("--init-from", metavar="SWEEP_DIR", help="start from a sweep's best uniform scale at --len")
    for name in ("steps", "lr", "batch", "micro_batch", "lower_bound", "data", "seed", "dtype", "device", "chunk"):
        s.add_argument("--" + name.replace("_", "-"), type=type(d[name]), default=d[name], help=f"(default {d[name]})")
    s.add_argument("--checkpointing", action="store_true", help="activation checkpointing (long --len on GPU)")
    s.add_argument("--out", required=True, help="output .safetensors (scale_param per layer) + .json beside it")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_search_heads)


def cmd_search_heads(args) -> int:
    from transformers.utils import logging as hf_logging

    from entropy_lens.head_search import HeadSearchConfig, check_out, save_head_scales, search_head_scales

    hf_logging.disable_progress_bar()
    init = args.init if args.init is not None else 1.0
    if args.init_from:
        from entropy_lens.analysis import best_uniform_scale, load_sweep

        init = best_uniform_scale(load_sweep(args.init_from), length=args.length)
        print(f"initial scale {init:g}: the lowest mean loss over positions < {args.length} in {args.init_from}")
    names = [f.name for f in dataclasses.fields(HeadSearchConfig) if f.name not in ("model", "length", "init")]
    config = HeadSearchConfig(model=args.model, length=args.length, init=init, **{n: getattr(args, n) for n in names})
    config.check()
    check_out(args.out)  # before any work
    result = search_head_scales(config, progress=not args.quiet)
    out = save_head_scales(result, args.out)
    sc = result.scales
    print(f"{sc.size} head scales: min {sc.min():.3f}, median {np.median(sc):.3f}, max {sc.max():.3f} "
          f"(lower bound {config.lower_bound:g}); loss {result.log[0]['loss']:.3f} -> {result.log[-1]['loss']:.3f}")  # fmt: skip
    print(f"wrote {out} and {out}.json")
    return 0
