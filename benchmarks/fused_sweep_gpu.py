"""GPU benchmark: the Triton kernels config by config against sdpa (issue 69), TinyLlama's attention shape.

    python benchmarks/fused_sweep_gpu.py [--lengths 4096 16384 32768] [--configs 128,64,8,3 ...]
                                         [--baseline PATH] [--out benchmarks/results/fused_sweep_gpu.json]

One layer's attention, batch 1, bf16, 32 query heads over 4 KV heads, head dim 64, causal. For each length:
sdpa's forward (`enable_gqa`, the model's call) and flash-attn's where installed, then for each
(BLOCK_M, BLOCK_N, num_warps, num_stages) the fused kernel (output + entropy, what a scan runs by default)
and the entropy-only kernel (the separate path's second pass), then each with the autotuner's own pick,
and with `--baseline FILE` the autotuned kernels of another copy of triton_entropy.py (an earlier commit's,
timed in the same process for a like-for-like ratio). Times are triton.testing.do_bench medians (CUDA
events, L2 flushed). Each config's entropy is compared with the first config's (max |difference|, nats)
and its output with sdpa's: a wrong config shows there. A config that does not compile (shared memory,
registers) is listed as skipped. Prints a table, writes JSON after every length.
`--device cpu --tiny` under TRITON_INTERPRET=1 is a smoke test of this script (numbers mean nothing).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, gpu_or_refuse, make_record, parser, table, timed, write_json

CONFIGS = (
    (64, 64, 4, 2),
    (64, 64, 4, 3),
    (64, 128, 4, 2),
    (64, 128, 4, 3),
    (128, 64, 4, 2),
    (128, 64, 4, 3),
    (128, 64, 8, 2),
    (128, 64, 8, 3),
    (128, 64, 8, 4),
    (128, 128, 8, 2),
    (128, 128, 8, 3),
)
SHAPE = {"heads": 32, "kv_heads": 4, "head_dim": 64}
TINY = {"heads": 4, "kv_heads": 2, "head_dim": 16}


def attention_flops(heads: int, length: int, head_dim: int, products: int) -> float:
    """2 × the multiply-adds of `products` (1: QKᵀ, 2: QKᵀ and PV) over a causal square's half."""
    return 2.0 * products * heads * length * (length + 1) / 2 * head_dim


def _bench_fn(fn, device: str, repeats: int) -> float:
    """Median seconds of fn(): do_bench on a GPU, a plain timer otherwise."""
    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=10, rep=max(20, 10 * repeats), return_mode="median") / 1e3
    return timed(fn, repeats=repeats).median


def _load(path: str):
    spec = importlib.util.spec_from_file_location("baseline_triton_entropy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep_length(length: int, shape: dict, configs, device: str, repeats: int, baseline) -> list[dict]:
    import torch

    from entropy_lens.flags import Measure, Stats
    from entropy_lens.kernels import triton_entropy as te
    from entropy_lens.kernels.mods import ScoreMods

    torch.manual_seed(length)
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    dtype = torch.bfloat16
    q = torch.randn(1, hq, length, d, device=device, dtype=dtype)
    k = torch.randn(1, hkv, length, d, device=device, dtype=dtype)
    v = torch.randn_like(k)
    scale = torch.full((hq,), d**-0.5, device=device)
    mods = ScoreMods(causal=True)
    stats = ("entropy",)
    sdpa_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rows = []

    def row(kind, config, seconds, products, **extra):
        flops = attention_flops(hq, length, d, products)
        return {
            "len": length,
            "kind": kind,
            "config": config,
            "s": seconds,
            "tflops": flops / seconds / 1e12,
            **extra,
        }

    sdpa_s = _bench_fn(
        lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        device,
        repeats,
    )
    rows.append(row("sdpa", None, sdpa_s, 2))
    try:
        from flash_attn import flash_attn_func

        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        rows.append(
            row(
                "flash-attn",
                None,
                _bench_fn(lambda: flash_attn_func(qt, kt, vt, causal=True), device, repeats),
                2,
            )
        )
    except ImportError:
        pass
    reference = None

    def measure(kind, config, module, fused):
        nonlocal reference
        values = v if fused else None

        # what to measure as the kernel file takes it: a Measure, or (a baseline before it) the names
        takes = inspect.signature(module.row_stats_triton).parameters
        what = {"measure": Measure(stats=Stats(stats))} if "measure" in takes else {"stats": stats}

        def fn():
            return module.row_stats_triton(q, k, values, scale, mods, **what)

        try:
            if config is None:
                result = fn()
                seconds = _bench_fn(fn, device, repeats)
            else:
                with module.forced_config(*config):
                    result = fn()
                    seconds = _bench_fn(fn, device, repeats)
        except Exception as err:  # noqa: BLE001 - a config that does not compile or launch: listed, not fatal
            why = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:120]}"
            return {"len": length, "kind": kind, "config": config and list(config), "skipped": why}
        entropy = result["entropy"].float()
        if reference is None:
            reference = entropy
        extra = {"entropy_diff": float((entropy - reference).abs().max())}
        if fused:
            extra["output_diff"] = float((result.out.transpose(1, 2).float() - sdpa_out.float()).abs().max())
        return row(
            kind, config and list(config), seconds, 2 if fused else 1, x_sdpa=seconds / sdpa_s, **extra
        )

    for fused in (True, False):
        kind = "fused" if fused else "entropy"
        for config in configs:
            rows.append(measure(kind, config, te, fused))
        rows.append(measure(kind + " autotuned", None, te, fused))
        if baseline is not None:
            rows.append(measure(kind + " baseline", None, baseline, fused))
    for r in rows:
        if "x_sdpa" not in r and "skipped" not in r:
            r["x_sdpa"] = r["s"] / sdpa_s
    return rows


def _config(text: str) -> tuple[int, int, int, int]:
    """--configs' BLOCK_M,BLOCK_N,num_warps,num_stages: four positive integers."""
    parts = tuple(int(x) if x.strip().isdigit() else 0 for x in text.split(","))
    if len(parts) != 4 or min(parts) < 1:
        raise argparse.ArgumentTypeError(
            f"a config is BLOCK_M,BLOCK_N,num_warps,num_stages (positive integers), not {text!r}"
        )
    return parts


def main() -> int:
    ap = parser(__doc__, "fused_sweep_gpu", repeats=10)
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 32768])
    ap.add_argument("--configs", type=_config, nargs="+", default=list(CONFIGS))
    ap.add_argument("--baseline", help="another copy of kernels/triton_entropy.py to time with its autotuner")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: smoke test
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    gpu = gpu_or_refuse(args.device, "fused_sweep_gpu.py")
    if gpu is None:
        return 1
    baseline = _load(args.baseline) if args.baseline else None
    shape = TINY if args.tiny else SHAPE
    rows = []
    for length in args.lengths:
        new = sweep_length(length, shape, args.configs, args.device, args.repeats, baseline)
        for r in new:
            print(r, flush=True)
        rows += new
        write_json(
            Path(args.out), make_record("fused_sweep_gpu", gpu=gpu, shape=shape, dtype="bf16", rows=rows)
        )
    print("\n" + table(rows, COLUMNS))
    print(f"wrote {args.out}")
    return 0


COLUMNS = [
    Column("len", "len"),
    Column("kind", "kind", align="<"),
    Column("config", lambda r: "" if r["config"] is None else ",".join(map(str, r["config"])), align="<"),
    Column("ms", lambda r: r["s"] * 1e3 if "s" in r else None, ".3f"),
    Column("x sdpa", lambda r: r.get("x_sdpa"), ".2f"),
    Column("TFLOP/s", lambda r: r.get("tflops"), ".0f"),
    Column("|dH|", lambda r: r.get("entropy_diff"), ".1e"),
    Column("|dO|", lambda r: r.get("output_diff"), ".1e"),
    Column("notes", lambda r: r.get("skipped", ""), align="<"),
]


if __name__ == "__main__":
    sys.exit(main())
