"""CPU benchmark: what softcapping (Gemma 2), attention sinks (gpt-oss) and ALiBi (BLOOM, MPT, Falcon) cost
a capturing layer.

    python benchmarks/extras_cpu.py [--lengths 1024 2048 4096] [--repeats 3]
                                    [--out benchmarks/results/extras_cpu.json]

sdpa computes none of them (ALiBi only as a materialised T × S bias), so a capturing layer with them
takes a one-pass path that makes the output, the entropy and the sink mass from the same score tiles:
the native C++ kernel where it builds (`kernels.attention_with_entropy(..., backend="native")`), else the
exact streaming torch path (`backend="torch_chunked"`).
One layer of SmolLM2-135M's shape (9 query heads, 3 KV heads, head_dim 64), random fp32 q, k, v,
batch 1, causal:
  sdpa              torch sdpa, output only: what the layer costs without any capture
  separate          sdpa + the entropy pass (`attention_entropy`): a capturing layer without extras
  streamed          the streaming path without extras (output + entropy in one pass)
  streamed_softcap  the same with softcap = 50 (every score through tanh)
  streamed_sinks    the same with one sink logit per head (sink mass returned too)
  streamed_alibi    the same with ALiBi slopes (BLOOM's for 9 heads: a distance bias per score)
  native*           the four above on the native kernel (skipped, with native_status() in the JSON,
                    where it does not build)
  eager_softcap     the materialising alternative: scores, tanh, softmax, P·V and entropy on T × T
Reported: median wall time of `repeats` runs after one warm-up (the native kernel is built there), and
each mode's time over sdpa's.
Prints a table and writes JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, layer_qkv, parser, table, timed, write_record

MODES = (
    "sdpa",
    "separate",
    "streamed",
    "streamed_softcap",
    "streamed_sinks",
    "streamed_alibi",
    "native",
    "native_softcap",
    "native_sinks",
    "native_alibi",
    "eager_softcap",
)
HEADS, KV_HEADS, HEAD_DIM, SOFTCAP = 9, 3, 64, 50.0


def layer(mode: str, length: int):
    """A closure running one layer of `mode` at `length` tokens."""
    import torch

    from entropy_lens.kernels import attention_entropy, attention_with_entropy

    q, k, v = layer_qkv(length, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM)
    sinks = torch.randn(HEADS, generator=torch.Generator().manual_seed(1))
    slopes = 2.0 ** (-8.0 * torch.arange(1, HEADS + 1) / HEADS)  # ALiBi's geometric slopes
    scale = HEAD_DIM**-0.5

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale, enable_gqa=True
        )

    def eager_softcap():
        kk, vv = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
        s = torch.tanh(q @ kk.transpose(-1, -2) * (scale / SOFTCAP)) * SOFTCAP
        s = s.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
        p = torch.softmax(s, dim=-1)
        return p @ vv, torch.special.entr(p).sum(-1)

    def streamed(**mods):
        return attention_with_entropy(q, k, v, softmax_scale=scale, backend="torch_chunked", **mods)

    def native(**mods):
        return attention_with_entropy(q, k, v, softmax_scale=scale, backend="native", **mods)

    runs = {
        "sdpa": sdpa,
        "separate": lambda: (sdpa(), attention_entropy(q, k, softmax_scale=scale)),
        "streamed": lambda: streamed(),
        "streamed_softcap": lambda: streamed(softcap=SOFTCAP),
        "streamed_sinks": lambda: streamed(sinks=sinks),
        "streamed_alibi": lambda: streamed(alibi_slopes=slopes),
        "native": lambda: native(),
        "native_softcap": lambda: native(softcap=SOFTCAP),
        "native_sinks": lambda: native(sinks=sinks),
        "native_alibi": lambda: native(alibi_slopes=slopes),
        "eager_softcap": eager_softcap,
    }
    return runs[mode]


def main() -> int:
    ap = parser(__doc__, "extras_cpu", repeats=3)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    args = ap.parse_args()
    from entropy_lens.kernels import native_available, native_status

    modes = [m for m in MODES if native_available() or not m.startswith("native")]
    rows = []
    for length in args.lengths:
        t = {mode: timed(layer(mode, length), repeats=args.repeats).median for mode in modes}
        rows.append({"len": length, **{f"{m}_s": t[m] for m in modes}})
        print(
            f"len {length}: " + ", ".join(f"{m} {t[m]:.3f} s ({t[m] / t['sdpa']:.1f}×)" for m in modes),
            flush=True,
        )
    print(table(rows, [Column("len", "len"), *(Column(f"{m} s", f"{m}_s", ".3f") for m in modes)]))
    shape = f"1 causal layer, {HEADS} query heads, {KV_HEADS} KV heads, head_dim {HEAD_DIM}, fp32, batch 1"
    write_record(args.out, "extras_cpu", shape=shape, native=native_status(), rows=rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
