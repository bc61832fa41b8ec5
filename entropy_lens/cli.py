"""`entropy-lens` command line: thin subcommands over the functions notebooks call.

Heavy imports (torch, transformers) happen inside each command, so `--help` is instant.
Bad input exits with status 2 and one line saying what is wrong and how to fix it.
"""

from __future__ import annotations

import argparse
import sys

SCAN_EXAMPLES = """examples:
  entropy-lens scan smollm2 --len 512 --samples 2
  entropy-lens scan path/to/TinyLlama-NoPE-1.1B --nope --len 16384 --samples 8 --device cuda --scale 1.2
  entropy-lens scan path/to/TinyLlama-NoPE-HeadScale8k --len 8192 --device cuda   # reads scale_param
  entropy-lens scan model.gguf --len 4096 --data notes/ --out results/notes.npz --resume
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="entropy-lens", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("scan", help="per-layer, per-head, per-position attention entropy and loss",
                       epilog=SCAN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="CKPT", help="Hugging Face folder, .gguf file, or bundled name (smollm2)")
    p.add_argument("--len", dest="length", type=int, required=True, help="tokens per sequence (model input length)")
    p.add_argument("--samples", type=int, default=8, help="packed chunks to average over (default 8)")
    p.add_argument("--data", default="austen",
                   help="austen | austen:<novel> | austen-minus:<novel> | stdlib | a .txt file, folder of .txt, "
                        ".jsonl with a 'text' field, or .npy token ids [N, len+1] (default austen)")
    p.add_argument("--nope", action="store_true", default=None, help="remove rotary position embedding (NoPE)")
    scales = p.add_mutually_exclusive_group()
    scales.add_argument("--scale", type=float, help="uniform attention scale multiplier s: λ = s/√d for every head")
    scales.add_argument("--head-scales", metavar="F", help="per-head multipliers [layers, heads]: .safetensors/.npy/.json")
    p.add_argument("--dtype", default="auto", help="float32 | bfloat16 | float16 (default: float32 on CPU, bf16 on CUDA)")
    p.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (default auto)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="which chunks are drawn (default 0)")
    p.add_argument("--backend", default="auto", help="entropy kernel: auto | torch_chunked | reference")
    p.add_argument("--train-len", type=int, help="the model's training length (recorded for analysis)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a checkpoint's own Python code")
    p.add_argument("--out", help="results .npz (default results/<model>-len<N>.npz)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="finish an interrupted scan (or reuse a finished one)")
    mode.add_argument("--force", action="store_true", help="overwrite an existing --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_scan)
    return parser


def cmd_scan(args) -> int:
    from transformers.utils import logging as hf_logging

    from entropy_lens.results import summary
    from entropy_lens.scan import ScanConfig, default_out, scan

    hf_logging.disable_progress_bar()  # loading bars; the scan's own bar shows tokens/s

    config = ScanConfig(
        model=args.model, length=args.length, samples=args.samples, data=args.data, nope=args.nope,
        scale=args.scale, head_scales=args.head_scales, dtype=args.dtype, device=args.device,
        batch_size=args.batch_size, seed=args.seed, backend=args.backend, train_len=args.train_len,
        trust_remote_code=args.trust_remote_code,
    )  # fmt: skip
    out = args.out or default_out(config)
    result = scan(config, out=out, resume=args.resume, force=args.force, progress=not args.quiet)
    m = result.meta
    print(f"{m['model']}: {m['n_layers']} layers x {m['n_heads']} heads, len {m['len']}, {m['samples']} samples "
          f"of {m['data']}, {m['device']}/{m['dtype']}, backend {m['backend']}, {m['wall_time_s']:.1f} s")
    print(summary(result))
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from entropy_lens.errors import EntropyLensError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("entropy-lens: interrupted", file=sys.stderr)
        return 130


def _version() -> str:
    from entropy_lens import __version__

    return f"entropy-lens {__version__}"


if __name__ == "__main__":
    sys.exit(main())
