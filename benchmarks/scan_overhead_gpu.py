"""GPU benchmark: where a scan's time beyond the plain forward goes (issue 69, fixed costs), per sample.

    python benchmarks/scan_overhead_gpu.py [--lengths 4096 16384] [--out benchmarks/results/scan_overhead_gpu.json]

The TinyLlama-shaped NoPE model of scan_gpu.py (random weights, bf16, batch 1). Modes:
  plain     forward (sdpa) + next-token loss read to the host
  forward   the same inside EntropyRecorder(fused="on"): the capture's per-layer work, nothing summed
  scan      + the batch drained into float64 sums on the host, as `scan` does (ScanSums.add)
For each: the median wall time and, from one profiled run (torch.profiler), the CUDA runtime calls that
block the host (synchronisations, blocking copies) and the kernel launches per sample, with the host
operators that took the most time. Prints a table, writes JSON.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, gpu_or_refuse, make_record, parser, table, timed, write_json
from scan_gpu import TINY, build_model, tinyllama_config

MODES = ("plain", "forward", "scan")
BLOCKING = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy ",
    "cudaMemcpy\t",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
)
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC")


def step(model, mode: str, ids):
    """One sample of `mode` as a function of no arguments."""
    from entropy_lens.capture import EntropyRecorder, forward_hidden, next_token_nll
    from entropy_lens.runs.sums import ScanSums

    cfg = model.config
    sums = ScanSums(cfg.num_hidden_layers, cfg.num_attention_heads, ids.shape[1] - 1)

    def fn():
        with contextlib.nullcontext() if mode == "plain" else EntropyRecorder(model, fused="on") as rec:
            hidden = forward_hidden(model, ids[:, :-1])
        nll = next_token_nll(model, hidden, ids[:, 1:])
        if mode == "scan":
            sums.add(rec, nll)
        return nll.cpu()

    return fn


def profile_counts(fn, cuda: bool) -> dict:
    """The CUDA runtime calls of one run of fn: blocking ones and launches by name, and the host
    operators with the most self time (ms)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        fn()
        sync()
    events = prof.key_averages()
    runtime = {e.key: e.count for e in events if e.key.startswith(("cuda", "cu"))}
    blocking = {k: n for k, n in runtime.items() if k.startswith(BLOCKING) or k == "cudaMemcpy"}
    launches = sum(n for k, n in runtime.items() if k.startswith(LAUNCHES))
    # a tensor read as a Python number (.item(), bool(), int()): a synchronisation on a GPU
    blocking |= {e.key: e.count for e in events if e.key in ("aten::_local_scalar_dense", "aten::is_nonzero")}
    ops = sorted(
        (e for e in events if not e.key.startswith(("cuda", "cu", "ProfilerStep"))),
        key=lambda e: e.self_cpu_time_total,
        reverse=True,
    )
    top = [[e.key, e.count, round(e.self_cpu_time_total / 1e3, 3)] for e in ops[:15]]
    return {"blocking": blocking, "launches": launches, "runtime_calls": runtime, "top_host_ops_ms": top}


def main() -> int:
    import argparse

    ap = parser(__doc__, "scan_overhead_gpu", repeats=5)
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: smoke test
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    import torch

    gpu = gpu_or_refuse(args.device, "scan_overhead_gpu.py")
    if gpu is None:
        return 1
    cuda = args.device == "cuda"
    model = build_model(tinyllama_config(**(TINY if args.tiny else {})), args.device, torch.bfloat16)
    sync = torch.cuda.synchronize if cuda else None
    rows = []
    for length in args.lengths:
        ids = torch.randint(0, model.config.vocab_size, (1, length + 1), device=args.device)
        with torch.no_grad():
            for mode in MODES:
                fn = step(model, mode, ids)
                timing = timed(fn, repeats=args.repeats, warmup=2, sync=sync)
                row = {"len": length, "mode": mode, "median_s": timing.median, "times_s": timing.times}
                row.update(profile_counts(fn, cuda))
                rows.append(row)
                print(row, flush=True)
        write_json(Path(args.out), make_record("scan_overhead_gpu", gpu=gpu, rows=rows))
    plain = {r["len"]: r["median_s"] for r in rows if r["mode"] == "plain"}
    print(
        "\n"
        + table(
            rows,
            [
                Column("len", "len"),
                Column("mode", "mode", align="<"),
                Column("median s", "median_s", ".4f"),
                Column("x plain", lambda r: r["median_s"] / plain[r["len"]], ".2f"),
                Column("blocking calls", lambda r: sum(r["blocking"].values()) if "blocking" in r else None),
                Column("launches", lambda r: r.get("launches")),
                Column(
                    "blocking by name",
                    lambda r: ", ".join(f"{k} {n}" for k, n in r.get("blocking", {}).items()),
                    align="<",
                ),
            ],
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
