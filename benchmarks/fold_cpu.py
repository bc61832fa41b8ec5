"""CPU benchmark of one attention layer (SmolLM2-shaped: 9 query heads, 3 KV heads, d 64, float32):
sdpa alone, sdpa + the entropy pass ("separate"), and output + entropy in one streamed pass
("fused"), each with the per-tile step eager or compiled (kernels/fold.py), over block sizes; and
output + entropy from the native C++ kernel ("native", kernels/native) over its own block sizes.

    python benchmarks/fold_cpu.py [--lengths 2048 4096 8192] [--blocks 64x1024 128x512 256x512]
                                  [--native-blocks 64x512 128x512 256x512] [--repeats 3]
                                  [--profile 4096] [--out benchmarks/results/fold_cpu.json]

Each length runs in a fresh subprocess per fold mode (ENTROPY_LENS_COMPILE=0 eager, the default;
=1 compiled, built once per process). Reported: best of `repeats` wall times after one
warm-up, and the ratio to sdpa. `--profile T` adds where the time of one fused pass at length T
goes, by op (torch.profiler, self CPU time; the compiled per-tile step is one op), beside sdpa's
total: the matmuls alone (QKᵀ and e·V) against sdpa, which does the same two products, show how far a
torch-level pass is from the bound; and, where it builds, the native kernel's wall time with its
thread-seconds by phase (score GEMMs, row passes, e·V GEMMs: kernels/native `profile_native`), which
say how far it is from sdpa, which runs the same two GEMMs and one pass. The scan-level benchmark is
scan_cpu.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, layer_qkv, parser, run_json, table, timed, write_record


def worker(
    length: int, blocks: list[tuple[int, int]], repeats: int, native_blocks: list[tuple[int, int]]
) -> list[dict]:
    import torch

    from entropy_lens.kernels import (
        attention_entropy,
        attention_with_entropy,
        fold_status,
        native_available,
        native_status,
    )

    q, k, v = layer_qkv(length)
    scale = 64**-0.5

    def best(fn):
        return timed(fn, repeats=repeats).best

    def sdpa():
        kr, vr = k.repeat_interleave(3, 1), v.repeat_interleave(3, 1)
        return torch.nn.functional.scaled_dot_product_attention(q, kr, vr, is_causal=True, scale=scale)

    rows = [{"len": length, "variant": "sdpa", "block": None, "s": best(sdpa)}]
    for bq, bk in blocks:
        size = {"block_q": bq, "block_k": bk}
        separate = best(lambda: (sdpa(), attention_entropy(q, k, softmax_scale=scale, **size)))  # noqa: B023
        fused = best(
            lambda size=size: attention_with_entropy(
                q, k, v, softmax_scale=scale, backend="torch_chunked", **size
            )
        )
        for variant, s in (("separate", separate), ("fused", fused)):
            rows.append({"len": length, "variant": variant, "block": f"{bq}x{bk}", "s": s})
    for r in rows:
        r["fold"] = fold_status() if r["variant"] != "sdpa" else None
    # the native kernel has no per-tile step to compile: its rows come from the eager process only
    if os.environ.get("ENTROPY_LENS_COMPILE", "0") == "0":
        for bq, bk in native_blocks:
            if not native_available():
                rows.append({"len": length, "variant": "native", "block": None, "skipped": native_status()})
                break
            tile = {"block_q": bq, "block_k": bk}
            s = best(
                lambda tile=tile: attention_with_entropy(
                    q, k, v, softmax_scale=scale, backend="native", **tile
                )
            )
            rows.append({"len": length, "variant": "native", "block": f"{bq}x{bk}", "s": s, "fold": None})
    for r in rows:
        r["threads"] = torch.get_num_threads()
    return rows


def profile(length: int, block: tuple[int, int]) -> dict:
    """Self CPU seconds by op of one fused pass at `length` (after a warm-up), and sdpa's seconds."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from entropy_lens.kernels import attention_with_entropy

    q, k, v = layer_qkv(length)
    kr, vr = k.repeat_interleave(3, 1), v.repeat_interleave(3, 1)
    size = {"block_q": block[0], "block_k": block[1]}

    def fused():
        return attention_with_entropy(q, k, v, softmax_scale=0.125, backend="torch_chunked", **size)

    fused()  # warm-up, as sdpa's in `timed`
    sdpa = timed(
        lambda: torch.nn.functional.scaled_dot_product_attention(q, kr, vr, is_causal=True), repeats=1
    ).best
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        fused()
    ops = {}
    for e in prof.key_averages():
        name = "compiled fold" if "CompiledFxGraph" in e.key else e.key
        ops[name] = ops.get(name, 0.0) + e.self_cpu_time_total / 1e6
    total = sum(ops.values())
    top = dict(sorted(ops.items(), key=lambda kv: -kv[1])[:6])
    top["other"] = total - sum(top.values())
    out = {"len": length, "block": f"{block[0]}x{block[1]}", "sdpa_s": sdpa, "fused_s": total, "ops_s": top}
    from entropy_lens.kernels.native import native_available, profile_native

    if native_available():  # the native kernel at its default tile: wall time, and thread-seconds by phase
        native = timed(
            lambda: attention_with_entropy(q, k, v, softmax_scale=0.125, backend="native"), repeats=1
        )
        out["native"] = {
            "s": native.best,
            "threads": torch.get_num_threads(),
            "thread_s": profile_native(q, k, v, 0.125),
        }
    return out


def main() -> None:
    ap = parser(__doc__, "fold_cpu", repeats=3)
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument("--blocks", nargs="+", default=["64x1024", "128x512", "256x512"])
    ap.add_argument("--native-blocks", nargs="+", default=["64x512", "128x512", "256x512"])
    ap.add_argument("--profile", type=int, metavar="T", help="also profile one fused pass at length T")
    ap.add_argument("--profile-worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    blocks = [tuple(int(x) for x in b.split("x")) for b in args.blocks]
    native_blocks = [tuple(int(x) for x in b.split("x")) for b in args.native_blocks]
    if args.worker:
        print(json.dumps(worker(args.worker, blocks, args.repeats, native_blocks)))
        return
    if args.profile_worker:
        print(json.dumps(profile(args.profile_worker, blocks[0])))
        return
    rows = []
    for length in args.lengths:
        for compiled in ("0", "1"):
            cmd = [sys.executable, __file__, "--worker", str(length), "--repeats", str(args.repeats)]
            cmd += ["--blocks", *args.blocks, "--native-blocks", *args.native_blocks]
            env = {**os.environ, "ENTROPY_LENS_COMPILE": compiled}
            got = run_json(cmd, env=env)
            rows += [r for r in got if r["variant"] != "sdpa" or compiled == "1"]
            for r in got:
                if "skipped" in r:
                    print(f"  len {length} {r['variant']:>8} skipped: {r['skipped']}")
                    continue
                print(
                    f"  len {length} {r['variant']:>8} {r['block'] or '':>8} {r['fold'] or '':>10} {r['s']:.3f} s"
                )
    sdpa = {r["len"]: r["s"] for r in rows if r["variant"] == "sdpa"}
    columns = [Column("len", "len"), Column("variant", "variant"), Column("block", "block")]
    columns += [Column("fold", "fold"), Column("s", "s", ".3f")]
    columns += [Column("x sdpa", lambda r: r["s"] / sdpa[r["len"]], ".2f")]
    print("\n" + table(rows, columns))
    prof = None
    if args.profile:
        cmd = [sys.executable, __file__, "--profile-worker", str(args.profile), "--blocks", args.blocks[0]]
        prof = run_json(cmd)
        print(
            f"\nfused pass at {prof['len']} ({prof['block']}): {prof['fused_s']:.3f} s, sdpa {prof['sdpa_s']:.3f} s"
        )
        for name, sec in prof["ops_s"].items():
            print(f"  {name:>24} {sec:>7.3f} s  {sec / prof['sdpa_s']:>5.2f} x sdpa")
        if "native" in prof:
            nat = prof["native"]
            print(
                f"native kernel: {nat['s']:.3f} s ({nat['s'] / prof['sdpa_s']:.2f} x sdpa); thread-seconds:"
            )
            for name, sec in nat["thread_s"].items():
                print(
                    f"  {name:>24} {sec:>7.3f} s  {sec / nat['threads'] / prof['sdpa_s']:>5.2f} x sdpa per thread"
                )
    shape = "one layer: 9 query heads, 3 KV heads, d 64, float32, causal (SmolLM2-135M)"
    write_record(args.out, "fold_cpu", shape=shape, rows=rows, **({"profile": prof} if prof else {}))


if __name__ == "__main__":
    main()
