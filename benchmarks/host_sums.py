"""Host-side cost of a scan's sums per batch, at TinyLlama's shape (22 layers, 32 heads), no model:

    python benchmarks/host_sums.py [--lengths 4096 16384 65536 131072] [--batch 1] [--repeats 5]
                                   [--out benchmarks/results/host_sums.json]

On a GPU the forward of a batch is fast (~0.1-0.2 s at 16K for TinyLlama on an H100, an estimate until
scan_gpu.py has run), so what the host does per batch with the entropies counts: the recorder sums
each layer's (B, H, T) entropy in float64 and the scan adds the batch's sums to its running sums.
This times exactly that code (EntropyRecorder's per-layer callback, then `runs.sums.ScanSums.add`)
on the CPU with random entropies standing in for the layers' output, the median of `repeats` batches
after one warm-up batch, and prints a table and writes JSON. Page faults of freshly allocated arrays
are part of what it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

LAYERS, HEADS = 22, 32


def batch_seconds(length: int, batch: int, repeats: int) -> list[float]:
    import torch
    from transformers import PretrainedConfig

    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.runs.sums import ScanSums

    config = PretrainedConfig(num_hidden_layers=LAYERS, num_attention_heads=HEADS)
    model = SimpleNamespace(config=config)  # the recorder reads only the config here: no weights needed
    sums = ScanSums(LAYERS, HEADS, length)
    entropy = [torch.rand(batch, HEADS, length) for _ in range(LAYERS)]
    nll = torch.rand(batch, length)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        rec = EntropyRecorder(model)
        for layer in range(LAYERS):
            rec.session.on_stats(layer, {"entropy": entropy[layer].clone()}, 0)  # fresh, as each layer gives
        sums.add(rec, nll)
        times.append(time.perf_counter() - t0)
    return times[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536, 131072])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "host_sums.json"))
    args = ap.parse_args()

    import torch

    from entropy_lens.results import atomic_write_text

    rows = []
    print(f"{'len':>7} {'batch':>5} {'median ms':>10} {'min ms':>8} {'MB summed':>10}")
    for length in args.lengths:
        times = batch_seconds(length, args.batch, args.repeats)
        mb = 2 * LAYERS * HEADS * length * 8 / 2**20  # the float64 sum and sum of squares
        rows.append(
            {
                "len": length,
                "batch": args.batch,
                "median_s": statistics.median(times),
                "times_s": times,
                "sums_mb": mb,
            }
        )
        print(
            f"{length:>7} {args.batch:>5} {1e3 * statistics.median(times):>10.1f} {1e3 * min(times):>8.1f} "
            f"{mb:>10.0f}",
            flush=True,
        )
    record = {
        "benchmark": "host_sums",
        "shape": f"{LAYERS} layers x {HEADS} heads (TinyLlama)",
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
    }
    atomic_write_text(args.out, json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
