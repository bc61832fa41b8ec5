"""CPU benchmark: what the row statistics beyond entropy (`--stats`, kernels/stats.py) cost.

    python benchmarks/stats_cpu.py [--parts layer scan memory] [--layer-lengths 8192 16384]
                                   [--scan-len 8192] [--memory-lengths 16384 131072] [--repeats 3]
                                   [--out benchmarks/results/stats_cpu.json]

layer   one causal layer of SmolLM2-135M's shape (9 query heads, 3 KV heads, head_dim 64, fp32, batch 1)
        on the native kernel's one pass (output and statistics, what a CPU scan runs): entropy alone,
        entropy with each other statistic, and all of them; the median of `repeats` rounds, the modes
        interleaved within each round so that drift in the machine's speed reaches them alike.
scan    `entropy-lens scan smollm2` per sample at --scan-len with --fused on (the native kernel), entropy
        alone against --stats all: benchmarks/scan_cpu.py's workers `scan-native` and `scan-stats`, each
        its own process, run twice in alternation; each row's median is over both processes' runs.
memory  the host's float64 sums a scan keeps (runs.sums.ScanSums, fed one batch through an
        EntropyRecorder as benchmarks/host_sums.py does) at TinyLlama's shape (22 layers, 32 heads), per
        statistic set: the bytes of the sum arrays, and the process's peak RSS over its start, each set in
        its own process; a set whose sums would exceed half the machine's memory is skipped, saying so.
Prints a table and writes JSON; benchmarks/readme_tables.py makes the README's rows from it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import layer_qkv, parser, peak_rss_mb, physical_memory_bytes, run_json, timed, write_record

HERE = Path(__file__).parent
HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
LAYERS, TINY_HEADS = 22, 32  # TinyLlama's, as host_sums.py
EXTRA = ("max_prob", "collision_entropy", "varentropy", "distance", "first_mass")
LAYER_MODES = (
    {"entropy": ("entropy",)} | {f"+{s}": ("entropy", s) for s in EXTRA} | {"all": ("entropy", *EXTRA)}
)
MEMORY_SETS = LAYER_MODES


def layer_rows(lengths, repeats) -> list[dict]:
    from entropy_lens.kernels import attention_with_entropy, native_available, native_status

    if not native_available():
        return [{"len": n, "skipped": f"native kernel {native_status()}"} for n in lengths]
    rows = []
    for length in lengths:
        q, k, v = layer_qkv(length, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM)

        def run(stats, q=q, k=k, v=v):
            attention_with_entropy(q, k, v, softmax_scale=HEAD_DIM**-0.5, stats=stats, backend="native")

        times = {mode: [] for mode in LAYER_MODES}
        for stats in LAYER_MODES.values():
            run(stats)  # warm-up
        for _ in range(repeats):
            for mode, stats in LAYER_MODES.items():
                times[mode] += timed(lambda stats=stats: run(stats), repeats=1, warmup=0).times
        row = {
            "len": length,
            "median_s": {m: statistics.median(t) for m, t in times.items()},
            "times_s": times,
        }
        rows.append(row)
        base = row["median_s"]["entropy"]
        print(
            f"layer {length}: "
            + ", ".join(f"{m} {s:.3f} s ({s / base:.3f}×)" for m, s in row["median_s"].items()),
            flush=True,
        )
    return rows


def scan_rows(length, repeats) -> list[dict]:
    runs = {"scan-native": [], "scan-stats": []}
    for _ in range(2):
        for mode, workers in runs.items():
            cmd = [
                sys.executable,
                str(HERE / "scan_cpu.py"),
                "--worker",
                mode,
                str(length),
                "--repeats",
                str(repeats),
            ]
            try:
                workers.append(run_json(cmd))
            except RuntimeError as err:
                return [{"len": length, "mode": mode, "skipped": str(err)}]
            print(f"scan {mode} {length}: {workers[-1]['times_s']}", flush=True)
    rows = []
    for mode, workers in runs.items():
        times = [t for w in workers for t in w["times_s"]]
        rows.append(
            {
                "len": length,
                "mode": mode,
                "stats": workers[0].get("stats", ["entropy"]),
                "median_s": statistics.median(times),
                "times_s": times,
                "peak_rss_mb": max(w["peak_rss_mb"] for w in workers),
                "paths": sorted({p for w in workers for p in w.get("paths", [])}),
            }
        )
    return rows


def memory_worker(length: int, set_name: str) -> dict:
    """One batch of fake layer reports through an EntropyRecorder into ScanSums, in this process."""
    import torch
    from transformers import PretrainedConfig

    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.runs.sums import ScanSums

    stats = MEMORY_SETS[set_name]
    start = peak_rss_mb()
    config = PretrainedConfig(num_hidden_layers=LAYERS, num_attention_heads=TINY_HEADS)
    rec = EntropyRecorder(SimpleNamespace(config=config), stats=stats)  # only the config is read: no weights
    sums = ScanSums(LAYERS, TINY_HEADS, length)
    for layer in range(LAYERS):
        rec.session.reports.report_stats(layer, {s: torch.rand(1, TINY_HEADS, length) for s in stats}, 0)
    sums.add(rec, torch.rand(1, length))
    peak = peak_rss_mb()
    sum_bytes = sum(
        a.nbytes for name, a in sums.arrays.items() if name not in ("loss", "loss_sq", "count", "samples")
    )
    return {
        "len": length,
        "set": set_name,
        "stats": list(stats),
        "sums_mb": sum_bytes / 2**20,
        "rss_mb": peak - start,
    }


def memory_rows(lengths) -> list[dict]:
    avail = physical_memory_bytes()
    rows = []
    for length in lengths:
        for set_name, stats in MEMORY_SETS.items():
            need = 2 * len(stats) * LAYERS * TINY_HEADS * length * 8  # each a float64 sum and its square's
            if need > avail / 2:
                rows.append(
                    {
                        "len": length,
                        "set": set_name,
                        "skipped": f"its sums alone need {need / 2**30:.1f} GiB of {avail / 2**30:.0f} GiB",
                    }
                )
                continue
            cmd = [sys.executable, __file__, "--memory-worker", str(length), set_name]
            try:
                rows.append(run_json(cmd))
            except RuntimeError as err:
                rows.append({"len": length, "set": set_name, "skipped": str(err)})
            r = rows[-1]
            print(
                f"memory {length} {set_name}: "
                + (r.get("skipped") or f"{r['sums_mb']:.0f} MB sums, {r['rss_mb']:.0f} MB RSS"),
                flush=True,
            )
    return rows


def main(argv=None) -> int:
    ap = parser(__doc__, "stats_cpu", repeats=3)
    ap.add_argument(
        "--parts", nargs="+", default=["layer", "scan", "memory"], choices=["layer", "scan", "memory"]
    )
    ap.add_argument("--layer-lengths", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--scan-len", type=int, default=8192)
    ap.add_argument("--memory-lengths", type=int, nargs="+", default=[16384, 131072])
    ap.add_argument("--memory-worker", nargs=2, metavar=("LEN", "SET"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_worker:
        print(json.dumps(memory_worker(int(args.memory_worker[0]), args.memory_worker[1])))
        return 0
    parts = {}
    if "layer" in args.parts:
        parts["layer"] = layer_rows(args.layer_lengths, args.repeats)
    if "scan" in args.parts:
        parts["scan"] = scan_rows(args.scan_len, args.repeats)
    if "memory" in args.parts:
        parts["memory"] = memory_rows(args.memory_lengths)
    write_record(args.out, "stats_cpu", repeats=args.repeats, **parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
