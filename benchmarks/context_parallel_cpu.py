"""One sequence on one process against the same sequence sharded over P (--context-parallel), on CPU.

    python benchmarks/context_parallel_cpu.py [--model smollm2] [--len 16384] [--samples 1] [--processes 2]
                                              [--baseline-len 512] [--out benchmarks/results/context_parallel_cpu.json]
    python benchmarks/context_parallel_cpu.py --device cuda --processes 4 --len 131072   # GPUs (gpu_checks.sh)

Runs `entropy-lens scan MODEL --len T` twice in fresh processes, with the same cores: 1 process x P threads
(`--threads P`), then P processes x 1 thread under torchrun (`--threads 1 --context-parallel`, gloo). Each
process reports its own wall time and peak resident memory (ru_maxrss); the scan's own wall time
(model loading included, imports not) comes from its results file. Each configuration also scans
`--baseline-len` tokens, so the table separates what grows with T from what every process holds anyway
(Python, torch, transformers, the weights, a loss chunk), and sets both beside the memory model of
runs/memory_model.py (docs/scaling.md): modelled peak(T) − peak(baseline) against the measured one. The
two scans' entropy and loss are compared too (their largest difference). The issue's goals: each rank's
peak at most 0.6x the one process's, wall time at most 1.2x. Prints a table and writes JSON.

`--device cuda` runs the same on GPUs: one process on one GPU against P processes on P GPUs (nccl), each
rank's peak then its device's `max_memory_allocated` (modelled in bfloat16, without the host's sums).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from entropy_lens.results import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
MODEL_SHAPES = {"smollm2": "SmolLM2-135M"}  # bundled name -> runs.memory_model.SHAPES


def worker(report: str, scan_args: list[str]) -> int:
    """Inside each measured process: the scan as the CLI runs it, then this process's report."""
    from entropy_lens.cli import main as cli

    started = time.perf_counter()
    code = cli(scan_args)
    rank = int(os.environ.get("RANK", "0"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak = torch.cuda.max_memory_allocated()  # this rank's GPU (the scan set it current)
    record = {"rank": rank, "code": code, "process_s": time.perf_counter() - started, "peak_bytes": peak}
    Path(report, f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    return code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(
    model: str, length: int, samples: int, processes: int, sharded: bool, folder: Path, device: str = "cpu"
) -> dict:
    """One configuration in fresh processes: its ranks' reports and the scan's results meta."""
    report = folder / f"{'cp' if sharded else 'one'}-{length}"
    report.mkdir()
    out = report / "scan.npz"
    args = ["scan", model, "--len", str(length), "--samples", str(samples), "--data", "austen"]
    args += ["--out", str(out), "--force", "--quiet", "--device", device]
    if device == "cpu":  # the same cores for both: P threads in one process, one in each of P
        args += ["--threads", str(1 if sharded else processes)]
    me = [str(Path(__file__).resolve()), "--worker", str(report), "--"]
    if sharded:
        launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes)]
        launch += ["--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
        cmd = [*launch, *me, *args, "--context-parallel"]
    else:
        cmd = [sys.executable, *me, *args]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env["OMP_NUM_THREADS"] = str(1 if sharded else processes)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the scan failed ({' '.join(cmd)}):\n{done.stderr.strip()[-3000:]}")
    ranks = sorted(
        (json.loads(p.read_text(encoding="utf-8")) for p in report.glob("rank*.json")),
        key=lambda r: r["rank"],
    )
    from entropy_lens.results import ScanResult

    result = ScanResult.load(out)
    return {
        "len": length,
        "processes": processes if sharded else 1,
        "threads": (1 if sharded else processes) if device == "cpu" else None,
        "context_parallel": result.meta["context_parallel"],
        "scan_s": result.meta["wall_time_s"],
        "launch_s": wall,
        "peak_mb": [r["peak_bytes"] / 2**20 for r in ranks],
        "attention_path": result.meta["attention_path"],
        "result": result,
    }


def modelled_mb(model: str, length: int, processes: int, device: str = "cpu") -> float | None:
    """runs.memory_model's peak for one rank, the sharded sdpa term included (`--fused auto` tries the
    sdpa route on the first layers): on CPU float32 and with the host's sums (resident memory), on CUDA
    bfloat16 and without them."""
    from entropy_lens.runs.memory_model import SHAPES, rank_bytes

    shape = SHAPES.get(MODEL_SHAPES.get(model, model))
    if shape is None:
        return None
    cpu = device == "cpu"
    terms = rank_bytes(shape, length, processes, dtype_bytes=4 if cpu else 2, sdpa_output=processes > 1)
    return (terms["peak"] + (terms["host_sums"] if cpu else 0)) / 2**20


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1], argv[3:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--len", dest="length", type=int, default=16384)
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--baseline-len", type=int, default=512)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--out", default="benchmarks/results/context_parallel_cpu.json")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sharded in (False, True):
            for length in (args.baseline_len, args.length):
                rows.append(
                    run(args.model, length, args.samples, args.processes, sharded, Path(tmp), args.device)
                )
    import numpy as np

    one, cp = rows[1].pop("result"), rows[3].pop("result")
    for r in rows:
        r.pop("result", None)
        r["modelled_mb"] = modelled_mb(args.model, r["len"], r["processes"], args.device)
    for base, full in ((rows[0], rows[1]), (rows[2], rows[3])):
        full["growth_mb"] = max(full["peak_mb"]) - max(base["peak_mb"])
        if full["modelled_mb"] is not None:
            full["modelled_growth_mb"] = full["modelled_mb"] - base["modelled_mb"]
    summary = {
        "rank_peak_over_one": max(rows[3]["peak_mb"]) / rows[1]["peak_mb"][0],
        # None where the one process's peak did not grow above the short scan's (toy sizes): no ratio
        "growth_over_one": rows[3]["growth_mb"] / rows[1]["growth_mb"] if rows[1]["growth_mb"] > 0 else None,
        "scan_s_over_one": rows[3]["scan_s"] / rows[1]["scan_s"],
        "launch_s_over_one": rows[3]["launch_s"] / rows[1]["launch_s"],
        "max_abs_entropy_difference": float(np.abs(cp.entropy - one.entropy).max()),
        "max_abs_loss_difference": float(np.abs(cp.loss - one.loss).max()),
        "goals": {"rank_peak_over_one": 0.6, "scan_s_over_one": 1.2},
    }
    print(table(args, rows, summary))
    import torch

    record = {
        "benchmark": "context_parallel_cpu",
        "model": args.model,
        "device": args.device,
        "peak": "ru_maxrss (resident memory)" if args.device == "cpu" else "torch.cuda.max_memory_allocated",
        "samples": args.samples,
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch_version": torch.__version__,
        "rows": rows,
        "summary": summary,
    }
    out = atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def table(args, rows: list[dict], summary: dict) -> str:
    what = "peak RSS MB per rank" if args.device == "cpu" else "peak GPU MB per rank"
    against = (
        f"{os.cpu_count()} cores: 1 process x {args.processes} threads against {args.processes} processes x 1 thread"
        if args.device == "cpu"
        else f"1 GPU against {args.processes} GPUs"
    )
    lines = [
        f"{args.model}, {args.samples} sample(s), {against} (--context-parallel)",
        (
            f"{'len':>7}{'processes':>10}{'threads':>8}{'scan s':>9}{'launch s':>10}  {what:<24}"
            f"{'modelled MB':>12}{'growth MB':>11}{'modelled':>10}"
        ),
    ]
    for r in rows:
        peaks = ", ".join(f"{mb:,.0f}" for mb in r["peak_mb"])
        modelled = "" if r["modelled_mb"] is None else f"{r['modelled_mb']:,.0f}"
        growth = f"{r['growth_mb']:,.0f}" if "growth_mb" in r else ""
        m_growth = f"{r['modelled_growth_mb']:,.0f}" if "modelled_growth_mb" in r else ""
        lines.append(
            f"{r['len']:>7}{r['processes']:>10}{r['threads'] or '':>8}{r['scan_s']:>9.1f}{r['launch_s']:>10.1f}  "
            f"{peaks:<24}{modelled:>12}{growth:>11}{m_growth:>10}"
        )
    s = summary
    lines.append(
        f"at {args.length}: each rank's peak / one process's {s['rank_peak_over_one']:.2f} (goal <= 0.6), "
        f"growth above {args.baseline_len} tokens {growth_ratio(s)}; scan time "
        f"{s['scan_s_over_one']:.2f}x (goal <= 1.2), launch to exit {s['launch_s_over_one']:.2f}x; "
        f"largest difference: entropy {s['max_abs_entropy_difference']:.2g}, loss "
        f"{s['max_abs_loss_difference']:.2g} nats"
    )
    lines.append(
        "modelled: runs/memory_model.py's peak (CPU: float32, + the host sums, without the process's fixed part; "
        "CUDA: bfloat16)"
    )
    return "\n".join(lines)


def growth_ratio(summary: dict) -> str:
    """The sharded growth over the one process's, or why there is none."""
    ratio = summary["growth_over_one"]
    return (
        "undefined (the one process's peak did not grow above the short scan's)"
        if ratio is None
        else f"{ratio:.2f}"
    )


if __name__ == "__main__":
    sys.exit(main())
