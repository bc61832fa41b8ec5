"""CPU benchmark: the entropy of a sliding-window layer, three ways, on the exact torch path.

    python benchmarks/window_cpu.py [--lengths 2048 8192] [--windows 256 1024] [--repeats 3]
                                    [--out benchmarks/results/window_cpu.json]

One layer of SmolLM2-135M's shape (9 query heads, 3 KV heads, head_dim 64), random fp32 q, k, batch 1:
  causal     plain causal attention: what a layer without a window costs (the O(T²/2) baseline)
  as_mask    the window given as transformers' (1, 1, T, T) bool mask, which the kernel cannot
             recognise when called directly: every causal block is computed and masked
  window     `window=W`: blocks behind the window are skipped, O(T·W)
  from_hf    the same mask decomposed first (`kernels.masks.decompose`, what the capture does once
             per forward), then `window=W`: the cost a sliding-window layer has inside a scan
Reported: median wall time of `repeats` runs after one warm-up. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from entropy_lens.results import atomic_write_text

MODES = ("causal", "as_mask", "window", "from_hf")


def run(mode: str, length: int, window: int, repeats: int) -> float:
    import torch

    from entropy_lens.kernels import attention_entropy
    from entropy_lens.kernels.masks import decompose
    from entropy_lens.kernels.reference import causal_visible

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 9, length, 64, generator=g), torch.randn(1, 3, length, 64, generator=g)
    hf_mask = causal_visible(length, length, window=window)[None, None]

    def fn():
        if mode == "causal":
            return attention_entropy(q, k, softmax_scale=0.125)
        if mode == "as_mask":
            return attention_entropy(q, k, softmax_scale=0.125, causal=False, mask=hf_mask)
        if mode == "window":
            return attention_entropy(q, k, softmax_scale=0.125, window=window)
        keep, w = decompose(hf_mask, 1, length, length, True)
        return attention_entropy(q, k, softmax_scale=0.125, mask=keep, window=w)

    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--windows", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "window_cpu.json"))
    args = ap.parse_args()
    import torch

    rows = []
    print(f"{'len':>6} {'window':>6} " + " ".join(f"{m + ' s':>10}" for m in MODES) + f" {'speed-up':>9}")
    for length in args.lengths:
        for window in args.windows:
            t = {mode: run(mode, length, window, args.repeats) for mode in MODES}
            rows.append({"len": length, "window": window, **{f"{m}_s": t[m] for m in MODES}})
            print(
                f"{length:>6} {window:>6} "
                + " ".join(f"{t[m]:>10.3f}" for m in MODES)
                + f" {t['as_mask'] / t['from_hf']:>8.1f}×"
            )
    record = {
        "benchmark": "window_cpu",
        "shape": "1 layer, 9 query heads, 3 KV heads, head_dim 64, fp32, batch 1",
        "machine": {
            "cpu": platform.machine(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(record, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
