"""One sequence on one process against the same sequence sharded over P (--context-parallel), on CPU.

    python benchmarks/context_parallel_cpu.py [--model smollm2] [--len 16384] [--samples 1] [--processes 2]
                                              [--out benchmarks/results/context_parallel_cpu.json]
    python benchmarks/context_parallel_cpu.py --device cuda --processes 4 --len 131072   # GPUs (gpu_checks.sh)

Runs `entropy-lens scan MODEL --len T` twice in fresh processes, with the same cores: 1 process x P threads
(`--threads P`), then P processes x 1 thread under torchrun (`--threads 1 --context-parallel`, gloo). Each
process reports its wall time and three memory figures: what it holds when the scan's batches begin
(`fixed`: Python, torch, transformers, the weights, the float64 sums; every rank holds all of it), the
peak during the batches (the peak is reset there, Linux's /proc/self/clear_refs, so nothing before the
batches counts), and the whole process's peak (ru_maxrss, loading included). `growth` = batches' peak −
fixed is what the forward and the loss add: the part sharding can shrink, set beside the memory model of
runs/memory_model.py (docs/scaling.md, its `activations`). The scan's own wall time (model loading
included, imports not) comes from its results file; the two scans' entropy and loss are compared (their
largest difference). The issue's goals: each rank's peak at most 0.6x the one process's, wall time at most
1.2x. Prints a table and writes JSON.

`--device cuda` runs the same on GPUs: one process on one GPU against P processes on P GPUs (nccl), the
memory figures then the device's allocated bytes (`memory_allocated`, `max_memory_allocated` after
`reset_peak_memory_stats`), modelled in bfloat16.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import parser, peak_rss_mb, write_record

ROOT = Path(__file__).resolve().parent.parent
MODEL_SHAPES = {"smollm2": "SmolLM2-135M"}  # bundled name -> runs.memory_model.SHAPES


def worker(report: str, scan_args: list[str]) -> int:
    """Inside each measured process: the scan as the CLI runs it, then this process's report: its memory
    when the scan's batches begin (`fixed`: Python, torch, the weights, the sums), the peak during the
    batches (`batches_peak`, after resetting the peak there: Linux's clear_refs) and the whole process's
    peak (`peak`)."""
    import entropy_lens.runs.scan as scan_module
    from entropy_lens.cli import main as cli

    memory = {}
    loop = scan_module._loop

    def measured_loop(*args, **kwargs):
        memory["fixed"], memory["before_peak"] = _reset_peak()
        try:
            return loop(*args, **kwargs)
        finally:
            memory["batches_peak"] = _peak()

    scan_module._loop = measured_loop
    started = time.perf_counter()
    code = cli(scan_args)
    rank = int(os.environ.get("RANK", "0"))
    record = {
        "rank": rank,
        "code": code,
        "process_s": time.perf_counter() - started,
        "peak_bytes": max(memory["before_peak"], _peak()),
        "fixed_bytes": memory["fixed"],
        "batches_peak_bytes": memory["batches_peak"],
    }
    Path(report, f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    return code


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _peak() -> int:
    """The peak since the last reset: this rank's GPU's allocated bytes, or the process's resident bytes."""
    import torch

    if _cuda():
        return torch.cuda.max_memory_allocated()  # this rank's GPU (the scan set it current)
    return int(peak_rss_mb() * 2**20)


def _reset_peak() -> tuple[int, int]:
    """(the memory in use now, the peak so far), the peak then reset to the memory in use."""
    import torch

    if _cuda():
        now, before = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return now, before
    before = _peak()
    with open("/proc/self/status", encoding="ascii") as f:
        now = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="ascii")  # VmHWM (and ru_maxrss) := VmRSS
    except OSError as err:
        raise SystemExit(
            f"cannot reset the peak RSS ({err}): this benchmark needs Linux's /proc/self/clear_refs"
        )
    return now, before


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
    mb = 2**20
    return {
        "len": length,
        "processes": processes if sharded else 1,
        "threads": (1 if sharded else processes) if device == "cpu" else None,
        "context_parallel": result.meta["context_parallel"],
        "scan_s": result.meta["wall_time_s"],
        "launch_s": wall,
        "peak_mb": [r["peak_bytes"] / mb for r in ranks],
        "fixed_mb": [r["fixed_bytes"] / mb for r in ranks],
        "growth_mb": [(r["batches_peak_bytes"] - r["fixed_bytes"]) / mb for r in ranks],
        "attention_path": result.meta["attention_path"],
        "result": result,
    }


def modelled_growth_mb(model: str, length: int, processes: int, device: str = "cpu") -> float | None:
    """runs.memory_model's `activations` of one rank (what its batches add to its fixed memory), the
    sharded sdpa term included (`--fused auto` tries the sdpa route on the first layers): float32 on CPU,
    bfloat16 on CUDA; None for a model whose shape the memory model does not list."""
    from entropy_lens.runs.memory_model import SHAPES, rank_bytes

    shape = SHAPES.get(MODEL_SHAPES.get(model, model))
    if shape is None:
        return None
    cpu = device == "cpu"
    terms = rank_bytes(
        shape, length, processes, dtype_bytes=4 if cpu else 2, sdpa_output=processes > 1, device=device
    )
    return terms["activations"] / 2**20


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1], argv[3:])
    p = parser(__doc__, "context_parallel_cpu")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--len", dest="length", type=int, default=16384)
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            run(args.model, args.length, args.samples, args.processes, sharded, Path(tmp), args.device)
            for sharded in (False, True)
        ]
    import numpy as np

    one, cp = (r.pop("result") for r in rows)
    for r in rows:
        r["modelled_growth_mb"] = modelled_growth_mb(args.model, r["len"], r["processes"], args.device)
    summary = {
        "rank_peak_over_one": max(rows[1]["peak_mb"]) / rows[0]["peak_mb"][0],
        # what a rank holds before its first batch, against the one process's peak: no P goes below it
        "rank_fixed_over_one_peak": max(rows[1]["fixed_mb"]) / rows[0]["peak_mb"][0],
        # None where the one process's batches added nothing measurable (toy sizes): no ratio
        "growth_over_one": max(rows[1]["growth_mb"]) / rows[0]["growth_mb"][0]
        if rows[0]["growth_mb"][0] > 0
        else None,
        "scan_s_over_one": rows[1]["scan_s"] / rows[0]["scan_s"],
        "launch_s_over_one": rows[1]["launch_s"] / rows[0]["launch_s"],
        "max_abs_entropy_difference": float(np.abs(cp.entropy - one.entropy).max()),
        "max_abs_loss_difference": float(np.abs(cp.loss - one.loss).max()),
        "goals": {"rank_peak_over_one": 0.6, "scan_s_over_one": 1.2},
    }
    summary["text"] = summary_line(summary)  # the README's sentence (benchmarks/readme_tables.py)
    print(table(args, rows, summary))
    memory = "resident (VmRSS, ru_maxrss)" if args.device == "cpu" else "torch.cuda allocated bytes"
    fields = {"model": args.model, "device": args.device, "memory": memory, "samples": args.samples}
    write_record(args.out, "context_parallel_cpu", **fields, rows=rows, summary=summary)
    return 0


def mbs(values: list[float]) -> str:
    return ", ".join(f"{mb:,.0f}" for mb in values)


def table(args, rows: list[dict], summary: dict) -> str:
    against = (
        f"{os.cpu_count()} cores: 1 process x {args.processes} threads against {args.processes} processes x 1 thread"
        if args.device == "cpu"
        else f"1 GPU against {args.processes} GPUs"
    )
    lines = [
        (
            f"{args.model}, {args.length:,} tokens, {args.samples} sample(s), "
            f"{against} (--context-parallel); MB per rank"
        ),
        (
            f"{'processes':>10}{'threads':>8}{'scan s':>9}{'launch s':>10}  {'fixed':<14}{'growth':<14}"
            f"{'modelled':>9}  {'peak':<14}"
        ),
    ]
    for r in rows:
        modelled = "" if r["modelled_growth_mb"] is None else f"{r['modelled_growth_mb']:,.0f}"
        lines.append(
            f"{r['processes']:>10}{r['threads'] or '':>8}{r['scan_s']:>9.1f}{r['launch_s']:>10.1f}  "
            f"{mbs(r['fixed_mb']):<14}{mbs(r['growth_mb']):<14}{modelled:>9}  {mbs(r['peak_mb']):<14}"
        )
    lines.append(summary["text"])
    lines.append(
        "fixed: held when the batches begin; growth: the batches' peak above it (modelled: runs/memory_model.py's "
        "activations); peak: the whole process's"
    )
    return "\n".join(lines)


def summary_line(s: dict) -> str:
    """The goals against the measurement, in one sentence."""
    growth = (
        "undefined (the one process's batches added nothing measurable)"
        if s["growth_over_one"] is None
        else f"{s['growth_over_one']:.2f}"
    )
    return (
        f"Each rank's peak / the one process's: {s['rank_peak_over_one']:.2f} (goal ≤ 0.6; what a rank holds "
        f"before its first batch is already {s['rank_fixed_over_one_peak']:.2f} of it); growth: {growth}; "
        f"scan time: {s['scan_s_over_one']:.2f}× (goal ≤ 1.2); largest difference of the two scans: entropy "
        f"{s['max_abs_entropy_difference']:.2g}, loss {s['max_abs_loss_difference']:.2g} nats."
    )


if __name__ == "__main__":
    sys.exit(main())
