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

import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, parser, table, timed, write_record

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

    def one_batch():
        rec = EntropyRecorder(model)
        for layer in range(LAYERS):
            rec.session.reports.report_stats(
                layer, {"entropy": entropy[layer].clone()}, 0
            )  # fresh, as each layer gives
        sums.add(rec, nll)

    return timed(one_batch, repeats=repeats).times


def main() -> None:
    ap = parser(__doc__, "host_sums", repeats=5)
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536, 131072])
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    rows = []
    for length in args.lengths:
        times = batch_seconds(length, args.batch, args.repeats)
        mb = 2 * LAYERS * HEADS * length * 8 / 2**20  # the float64 sum and sum of squares
        rows.append({"len": length, "batch": args.batch, "median_s": statistics.median(times)})
        rows[-1].update(times_s=times, sums_mb=mb)
        print(f"len {length}: {1e3 * rows[-1]['median_s']:.1f} ms", flush=True)
    columns = [Column("len", "len"), Column("batch", "batch")]
    columns += [Column("median ms", lambda r: 1e3 * r["median_s"], ".1f")]
    columns += [
        Column("min ms", lambda r: 1e3 * min(r["times_s"]), ".1f"),
        Column("MB summed", "sums_mb", ".0f"),
    ]
    print(table(rows, columns))
    write_record(args.out, "host_sums", shape=f"{LAYERS} layers x {HEADS} heads (TinyLlama)", rows=rows)


if __name__ == "__main__":
    main()
