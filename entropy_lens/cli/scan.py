"""`entropy-lens scan` and `entropy-lens sweep`."""

from __future__ import annotations

import argparse

from entropy_lens.models.bundled import BUNDLED_MODELS

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
      --entropy none --out sweeps/nope50k --resume
"""


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "scan",
        help="per-layer, per-head, per-position attention entropy and loss",
        epilog=SCAN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_scan_args(p)
    scales = p.add_mutually_exclusive_group()
    scales.add_argument(
        "--scale", type=float, help="uniform attention scale multiplier s: λ = s/√d for every head"
    )
    scales.add_argument(
        "--head-scales", metavar="F", help="per-head multipliers [layers, heads]: .safetensors/.npy/.json"
    )
    p.add_argument(
        "--entropy",
        choices=["heads", "mean", "none"],
        default="heads",
        help="store entropy per head (default), averaged over each layer's heads, or not at all",
    )
    p.add_argument("--out", help="results .npz (default results/<model>-len<N>.npz)")
    _add_mode_args(p, "scan")
    p.set_defaults(func=cmd_scan)

    w = sub.add_parser(
        "sweep",
        help="one scan per uniform scale multiplier s, into a folder",
        epilog=SWEEP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_scan_args(w)
    w.add_argument("--scales", required=True, help="start:stop:step (stop included) or a comma list of s")
    w.add_argument(
        "--entropy",
        choices=["heads", "mean", "none"],
        default="mean",
        help="per head, averaged over each layer's heads (default: ~1/heads the size), or not at all",
    )
    w.add_argument("--out", required=True, help="sweep folder (sweep.json + one results file per scale)")
    _add_mode_args(w, "sweep")
    w.set_defaults(func=cmd_sweep)


def _add_scan_args(p) -> None:
    names = ", ".join(BUNDLED_MODELS)
    p.add_argument(
        "model",
        metavar="CKPT",
        help=f"Hugging Face folder or Hub id (org/name), .gguf file, or bundled name ({names})",
    )
    p.add_argument(
        "--len", dest="length", type=int, required=True, help="tokens per sequence (model input length)"
    )
    p.add_argument("--samples", type=int, default=8, help="packed chunks to average over (default 8)")
    p.add_argument(
        "--data",
        default="austen",
        help="austen | austen:<novel> | austen-minus:<novel> | stdlib | a .txt file, folder of .txt, "
        ".jsonl with a 'text' field, or .npy token ids [N, len+1] (default austen)",
    )
    p.add_argument(
        "--nope", action="store_true", default=None, help="remove rotary position embedding (NoPE)"
    )
    p.add_argument(
        "--rope-scaling",
        metavar="TYPE:FACTOR",
        help="scale the checkpoint's RoPE: dynamic:2 (HF dynamic NTK, the paper's RoPE-NTK), linear:F, "
        "yarn:F",
    )
    p.add_argument(
        "--dtype", default="auto", help="float32 | bfloat16 | float16 (default: float32 on CPU, bf16 on CUDA)"
    )
    p.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (default auto)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="which chunks are drawn (default 0)")
    p.add_argument(
        "--stride",
        type=int,
        metavar="S",
        help="draw overlapping windows of len+1 tokens starting every S tokens instead of "
        "non-overlapping chunks (sliding-window perplexity; see `entropy-lens ppl`)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        help="entropy kernel: auto (triton on CUDA, else torch_chunked) | torch_chunked | triton | reference",
    )
    p.add_argument(
        "--fused",
        choices=["auto", "on", "off"],
        default="auto",
        help="layer output + entropy in one fused pass (on; Triton on CUDA, the streamed torch path on "
        "CPU), sdpa + an entropy pass (off), or whichever is faster, timed on the first layers (auto, default)",
    )
    p.add_argument(
        "--train-len", type=int, help="the model's training length (default: what its config declares)"
    )
    p.add_argument(
        "--scale-schedule",
        metavar="KIND:X",
        help="query-position multipliers on top of the scales: piecewise:S (S beyond the training "
        "length L) or log:A (1 + A ln(i/L) beyond it); the paper's section 2.4",
    )
    p.add_argument("--trust-remote-code", action="store_true", help="allow a checkpoint's own Python code")
    p.add_argument("--revision", help="branch, tag or commit of a Hub id (org/name); default main")


def _add_mode_args(p, what: str) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume", action="store_true", help=f"finish an interrupted {what} (or reuse a finished one)"
    )
    mode.add_argument("--force", action="store_true", help="overwrite an existing --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def scan_config(args):
    """A ScanConfig from the parsed flags (scan and sweep share every field but the scale)."""
    import dataclasses

    from entropy_lens.runs.scan import ScanConfig

    names = {f.name for f in dataclasses.fields(ScanConfig)}
    return ScanConfig(**{k: v for k, v in vars(args).items() if k in names})


def cmd_scan(args) -> int:
    from entropy_lens.results import summary
    from entropy_lens.runs.distributed import world
    from entropy_lens.runs.scan import default_out, scan

    config = scan_config(args)
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
    print(f"wrote {out}")
    return 0


def cmd_sweep(args) -> int:
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.runs.distributed import world
    from entropy_lens.runs.sweep import parse_scales, sweep

    if world().size > 1:
        raise EntropyLensError(
            "sweep runs in one process; run it without torchrun (or torchrun one scan per scale)"
        )

    scales = parse_scales(args.scales)
    out = sweep(
        scan_config(args), scales, args.out, resume=args.resume, force=args.force, progress=not args.quiet
    )
    print(f"wrote {len(scales)} scans (s = {scales[0]:g} .. {scales[-1]:g}) and {out / 'sweep.json'}")
    return 0
