"""CPU threads on a busy machine: a tiny-nope scan beside other busy processes, per thread setting.

    python benchmarks/threads_cpu.py [--len 512] [--samples 32] [--busy 0 1] [--threads default 1]
                                     [--out benchmarks/results/threads_cpu.json]

For each number of busy processes (each a Python loop that keeps one core busy) and each thread
setting (`default`: torch's own choice, one thread per core unless OMP_NUM_THREADS says otherwise;
N: `--threads N`), runs `entropy-lens scan tiny-nope` in a fresh process and reads the scan's own
wall time from its results file (model loading excluded). OpenMP threads spin-wait for each other at
every parallel region, so a thread that shares its core with a busy process holds the others up:
with one busy process on 2 cores, the default can be several times slower than --threads 1.
Prints a table and writes JSON.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, parser, table, write_record

BUSY_LOOP = "while True:\n    pass\n"


def scan_once(length: int, samples: int, threads: str, out: Path) -> dict:
    """One scan in a fresh process; returns its meta (wall_time_s, threads, ...)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cmd = [sys.executable, "-m", "entropy_lens", "scan", "tiny-nope", "--len", str(length)]
    cmd += ["--samples", str(samples), "--data", "austen:persuasion", "--out", str(out), "--force", "--quiet"]
    if threads != "default":
        cmd += ["--threads", threads]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if run.returncode != 0:
        raise SystemExit(f"scan failed ({threads} threads): {run.stderr.strip()[-2000:]}")
    from entropy_lens.results import ScanResult

    return ScanResult.load(out).meta


def measure(length: int, samples: int, busy: int, threads: str, folder: Path) -> dict:
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0)  # let the busy processes take their cores
        meta = scan_once(length, samples, threads, folder / "scan.npz")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    seconds = meta["wall_time_s"]
    return {
        "busy_processes": busy,
        "threads_flag": threads,
        "threads": meta["threads"],
        "len": length,
        "samples": samples,
        "scan_s": seconds,
        "tok_per_s": length * samples / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "threads_cpu")
    p.add_argument("--len", dest="length", type=int, default=512)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--busy", type=int, nargs="+", default=[0, 1], help="busy processes beside the scan")
    p.add_argument("--threads", nargs="+", default=["default", "1"], help="'default' or a thread count")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for busy in args.busy:
            for threads in args.threads:
                rows.append(measure(args.length, args.samples, busy, threads, Path(tmp)))
    print(f"tiny-nope scan, len {args.length} x {args.samples} samples, {os.cpu_count()} cores")
    columns = [Column("busy processes", "busy_processes"), Column("--threads", "threads_flag")]
    columns += [
        Column("threads", "threads"),
        Column("scan s", "scan_s", ".2f"),
        Column("tok/s", "tok_per_s", ".0f"),
    ]
    print(table(rows, columns))
    write_record(args.out, "threads_cpu", rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
