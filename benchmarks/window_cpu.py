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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, layer_qkv, parser, table, timed, write_record

MODES = ("causal", "as_mask", "window", "from_hf")


def run(mode: str, length: int, window: int, repeats: int) -> float:

    from entropy_lens.kernels import attention_entropy
    from entropy_lens.kernels.masks import decompose
    from entropy_lens.kernels.reference import causal_visible

    q, k, _ = layer_qkv(length)
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

    return timed(fn, repeats=repeats).median


def main() -> int:
    ap = parser(__doc__, "window_cpu", repeats=3)
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--windows", type=int, nargs="+", default=[256, 1024])
    args = ap.parse_args()
    rows = []
    for length in args.lengths:
        for window in args.windows:
            rows.append({"len": length, "window": window})
            rows[-1].update({f"{m}_s": run(m, length, window, args.repeats) for m in MODES})
            print(
                f"len {length}, window {window}: "
                + ", ".join(f"{m} {rows[-1][m + '_s']:.3f} s" for m in MODES)
            )
    columns = [Column("len", "len"), Column("window", "window")]
    columns += [Column(f"{m} s", f"{m}_s", ".3f") for m in MODES]
    columns += [Column("speed-up", lambda r: r["as_mask_s"] / r["from_hf_s"], ".1f")]
    print(table(rows, columns))
    shape = "1 layer, 9 query heads, 3 KV heads, head_dim 64, fp32, batch 1"
    write_record(args.out, "window_cpu", shape=shape, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
