"""GPU benchmark: one recorded decode step against a plain one, and the split-key kernel (issue 69 item 5).

    python benchmarks/decode_gpu.py [--lengths 4096 16384 32768] [--parts kernel step] [--repeats 20]
                                    [--sweep 1 4 8 16 32 64] [--out benchmarks/results/decode_gpu.json]

The TinyLlama-shaped NoPE model of scan_gpu.py (random weights, bf16, batch 1), a cache of `length` tokens.
Parts, per length (median wall time of `--repeats` runs after warm-ups, which autotune):
  kernel  one layer's decode step, q (1, 32, 1, 64) on k, v (1, 4, S, 64): torch sdpa's output (the
          reference of the ratios), the entropy-only pass and the fused pass (output + entropy) with the
          row kernel (splits 1) and with the split launch `decode_splits` picks ("auto"), and the fused
          pass at each split count of `--sweep`; each row's largest difference from the row kernel's
          entropy (and output), so a split count that is fast and wrong shows
  step    one decode step of the model (a token on the cache, the cache growing by one each run):
          plain (sdpa, nothing recorded), recorded (GenerationRecorder, entropy, --fused auto: the split
          launch where the plan gives one) and recorded_row (the same with the row kernel:
          `forced_splits(1)`); the ratio to plain is issue 69's target, recorded <= 1.2x plain at 16K
Prints a table and writes JSON (after every row, so a run cut short keeps what it measured), with the
splits `decode_splits` gave each length. Needs CUDA; `--device cpu --tiny` with TRITON_INTERPRET=1 runs
both parts on a toy shape on the CPU (a smoke test of this script: its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, gpu_or_refuse, make_record, parser, table, timed, write_json

PARTS = ("kernel", "step")
LENGTHS = (4096, 16384, 32768)
SWEEP = (4, 8, 16, 32, 64)
TARGET = 1.2  # issue 69 item 5: a recorded decode step within 1.2x a plain one at 16K
# the kernel part's layer: TinyLlama's 32 query heads on 4 key heads, head dim 64 (tiny: 4 on 2, 16)
LAYER = {"heads": 32, "kv_heads": 4, "head_dim": 64}
TINY_LAYER = {"heads": 4, "kv_heads": 2, "head_dim": 16}


def build_parser() -> argparse.ArgumentParser:
    ap = parser(__doc__, "decode_gpu", repeats=20)
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="tokens in the cache")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument(
        "--sweep", type=int, nargs="*", default=list(SWEEP), help="split counts the kernel part times"
    )
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: smoke test
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    return ap


def check_args(args: argparse.Namespace) -> str | None:
    """Why the arguments cannot run (a line naming the fix), or None."""
    if any(n < 2 for n in args.lengths):
        return f"--lengths {args.lengths}: a decode step needs a cache of 2 tokens or more"
    if any(n < 1 for n in args.sweep):
        return f"--sweep {args.sweep}: split counts are 1 (the row kernel) or more"
    if args.repeats < 1:
        return f"--repeats {args.repeats}: time at least one run"
    return None


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row with `x_ref`: its time over its length's reference row (kernel: sdpa; step: plain), None
    where that reference was not measured; and `within_target` for a recorded step (<= TARGET)."""
    refs = {
        (r["part"], r["len"]): r["median_ms"]
        for r in rows
        if r["mode"] in ("sdpa", "plain") and "median_ms" in r
    }
    out = []
    for row in rows:
        ref = refs.get((row["part"], row["len"]))
        ratio = None if ref is None or "median_ms" not in row else row["median_ms"] / ref
        row = {**row, "x_ref": ratio}
        if row["part"] == "step" and row["mode"] == "recorded" and ratio is not None:
            row["within_target"] = ratio <= TARGET
        out.append(row)
    return out


COLUMNS = (
    Column("part", "part", align="<"),
    Column("len", "len"),
    Column("mode", "mode", align="<"),
    Column("splits", lambda r: r.get("splits")),
    Column("median ms", "median_ms", ".4f"),
    Column("x ref", "x_ref", ".2f"),
    Column("entropy diff", lambda r: r.get("entropy_diff"), ".1e"),
    Column("output diff", lambda r: r.get("output_diff"), ".1e"),
)


def write(out: str | Path, rows: list[dict], *, gpu: str, shape: dict) -> Path:
    """The record (rows with their ratios) written to `out`."""
    return write_json(
        out, make_record("decode_gpu", gpu=gpu, shape=shape, target=TARGET, rows=with_ratios(rows))
    )


def kernel_rows(length: int, args, layer: dict) -> list[dict]:
    """The kernel part at one cache length (module docstring)."""
    import torch
    import torch.nn.functional as F

    from entropy_lens.kernels import ScoreMods, attention_stats, attention_with_entropy, decode_splits
    from entropy_lens.kernels.splits import forced_splits

    g = torch.Generator().manual_seed(0)
    dev, dtype = args.device, torch.bfloat16
    H, Hkv, D = layer["heads"], layer["kv_heads"], layer["head_dim"]
    q = torch.randn(1, H, 1, D, generator=g).to(dev, dtype)
    k, v = (torch.randn(1, Hkv, length, D, generator=g).to(dev, dtype) for _ in range(2))
    scale = D**-0.5
    sync = torch.cuda.synchronize if dev == "cuda" else None
    auto = decode_splits(q, k, ScoreMods.build(q, k))

    def entropy():
        return attention_stats(q, k, softmax_scale=scale, backend="triton")["entropy"]

    def fused():
        return attention_with_entropy(q, k, v, softmax_scale=scale, stats=("entropy",), backend="triton")

    with forced_splits(1):
        row_entropy, row_out = entropy(), fused().out
    ways = [("sdpa", None, lambda: F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True))]
    ways += [("entropy", 1, entropy), ("entropy", None, entropy), ("fused", 1, fused), ("fused", None, fused)]
    ways += [("fused", n, fused) for n in args.sweep if n not in (1, auto)]
    rows = []
    for mode, splits, fn in ways:
        with contextlib.nullcontext() if splits is None or mode == "sdpa" else forced_splits(splits):
            got = fn()
            timing = timed(fn, repeats=args.repeats, warmup=3, sync=sync)
        row = {"part": "kernel", "len": length, "mode": mode, "splits": auto if splits is None else splits}
        if mode == "sdpa":
            row["splits"] = None
        row["median_ms"] = 1e3 * timing.median
        if mode == "entropy":
            row["entropy_diff"] = (got.float() - row_entropy.float()).abs().max().item()
        if mode == "fused":
            row["entropy_diff"] = (got["entropy"] - row_entropy).abs().max().item()
            row["output_diff"] = (got.out.float() - row_out.float()).abs().max().item()
        rows.append(row)
    return rows


def step_rows(model, length: int, args, splits: int) -> list[dict]:
    """The step part at one cache length: a prefill of `length` tokens (untimed), then decode steps;
    `splits`: what decode_splits gives the layers (the recorded row's)."""
    import torch
    from transformers import DynamicCache

    from entropy_lens import GenerationRecorder
    from entropy_lens.kernels.splits import forced_splits

    sync = torch.cuda.synchronize if args.device == "cuda" else None
    ids = torch.randint(0, model.config.vocab_size, (1, length), device=args.device)
    backend = {} if args.device == "cuda" else {"backend": "triton"}  # the smoke run's interpreter
    rows = []
    for mode in ("plain", "recorded", "recorded_row"):
        cache = DynamicCache()
        recorder = GenerationRecorder(model, stats=("entropy",), **backend) if mode != "plain" else None
        row_kernel = forced_splits(1) if mode == "recorded_row" else contextlib.nullcontext()
        with torch.no_grad(), recorder or contextlib.nullcontext(), row_kernel:
            logits = model(ids, past_key_values=cache, use_cache=True).logits
            token = logits[:, -1:].argmax(-1)

            def step(token=token, cache=cache):
                return model(token, past_key_values=cache, use_cache=True).logits

            timing = timed(step, repeats=args.repeats, warmup=2, sync=sync)
        ran = {"plain": None, "recorded": splits, "recorded_row": 1}[mode]
        rows.append(
            {"part": "step", "len": length, "mode": mode, "splits": ran, "median_ms": 1e3 * timing.median}
        )
    return rows


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    why = check_args(args)
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    gpu = gpu_or_refuse(args.device, "decode_gpu.py")
    if gpu is None:
        return 1
    import torch
    from scan_gpu import TINY, build_model, tinyllama_config

    from entropy_lens.kernels import ScoreMods, decode_splits

    layer = TINY_LAYER if args.tiny else LAYER
    shape = {**layer, "model": "tinyllama-nope" + ("-tiny" if args.tiny else ""), "dtype": "bfloat16"}
    model = build_model(tinyllama_config(**(TINY if args.tiny else {})), args.device, torch.bfloat16)
    rows: list[dict] = []
    for length in args.lengths:
        q = torch.empty(1, layer["heads"], 1, layer["head_dim"], device=args.device)
        k = torch.empty(1, layer["kv_heads"], length, layer["head_dim"], device=args.device)
        splits = decode_splits(q, k, ScoreMods.build(q, k))
        print(f"{length} keys: decode_splits gives {splits}", flush=True)
        for part in args.parts:
            rows += (
                kernel_rows(length, args, layer)
                if part == "kernel"
                else step_rows(model, length, args, splits)
            )
            write(args.out, rows, gpu=gpu, shape=shape)
    print("\n" + table(with_ratios(rows), COLUMNS))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
