"""What every benchmark script shares: its command line, the timer, the machine it ran on, the JSON it
writes and the table it prints. Not a benchmark itself (hence the underscore).

    from _bench import Column, parser, table, timed, write_record

benchmarks/ is not a package: a script run as `python benchmarks/x.py` finds this module beside it on
sys.path; a script loaded from its path (tests/conftest.py's `benchmark_script`) puts its own folder
there first (`sys.path.insert(0, ...)` at its top).

The record every script writes (`write_record`), at benchmarks/results/<benchmark>.json:

    {"benchmark": name, "schema_version": SCHEMA_VERSION, "created_utc": "...Z",
     "machine": machine(), ...the script's own fields..., "rows": [...]}

`machine` holds the CPU, cores, memory, torch's threads and versions (and the GPU, if any), the same keys
in every file. Files written before this module (no `schema_version`: version 0) hold the same `rows` and
script fields; only their machine description differs (a dict of fewer keys, a string, or loose top-level
keys: `cpu_count`, `python`, `torch`, `torch_version`), and no table reads it. `read_record` takes both.
"""

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from entropy_lens.results import atomic_write_text

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA_VERSION = 1  # 1: schema_version, created_utc and machine() in every record (0: before, no field)


# --- the command line ---------------------------------------------------------------------------------


def parser(doc: str, name: str, *, repeats: int | None = None) -> argparse.ArgumentParser:
    """An ArgumentParser described by the first line of the script's docstring, with `--out` (default
    benchmarks/results/<name>.json, wherever the script runs from) and, given a default, `--repeats`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / f"{name}.json"), help="the JSON to write")
    if repeats is not None:
        ap.add_argument("--repeats", type=int, default=repeats, help="timed runs after the warm-up")
    return ap


# --- timing -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Wall times in seconds of the timed runs (warm-ups excluded)."""

    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)


def timed(
    fn: Callable[[], object],
    *,
    repeats: int,
    warmup: int = 1,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Call `fn` `warmup` times untimed (allocator, autotuning, compilation), then `repeats` times timed.
    `sync` (e.g. torch.cuda.synchronize) runs after every call, inside the timed span, so asynchronous
    work is counted; `clock` is injectable for tests."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: time at least one run (--repeats 1 or more)")
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        sync()
        times.append(clock() - t0)
    return Timing(times)


def gpu_or_refuse(device: str, script: str) -> str | None:
    """What a GPU benchmark records as its card: the CUDA device's name, or for `--device cpu` (a smoke
    run) a label saying its timings mean nothing; None, after one line on stderr, where CUDA is asked for
    and absent."""
    import sys

    import torch

    if device != "cuda":
        return "none: CPU smoke run, timings mean nothing"
    if not torch.cuda.is_available():
        print(f"{script} needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return None
    return torch.cuda.get_device_name()


def layer_qkv(length: int, *, heads: int = 9, kv_heads: int = 3, head_dim: int = 64, seed: int = 0):
    """Random fp32 q (1, heads, T, D), k and v (1, kv_heads, T, D) of one layer, SmolLM2-135M's shape by
    default, drawn in that order from a generator seeded with `seed`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, length, head_dim, generator=g)
    k, v = (torch.randn(1, kv_heads, length, head_dim, generator=g) for _ in range(2))
    return q, k, v


# --- the machine and the process ----------------------------------------------------------------------


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, MiB (Linux's ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextlib.contextmanager
def capped_address_space():
    """Within the block, this process's address space is capped at what it maps now plus nine tenths of
    the memory available (Linux's MemAvailable; a tenth is left to the rest of the machine), so an
    allocation that does not fit fails (a RuntimeError from torch's allocator) instead of swapping or
    waking the OOM killer. Yields the GiB it may take, or None where /proc cannot tell (no cap then).
    The cap is lifted on leaving: a process that goes on (a test's) and every child it starts after
    (a browser reserves far more address space than it uses) must not inherit it."""
    try:
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        mapped, available = (
            int(d[key].split()[0]) * 1024 for d, key in ((status, "VmSize"), (meminfo, "MemAvailable"))
        )
    except (OSError, KeyError, ValueError):
        yield None
        return
    before = resource.getrlimit(resource.RLIMIT_AS)
    allowed = available * 9 // 10
    cap = mapped + allowed if before[0] == resource.RLIM_INFINITY else min(before[0], mapped + allowed)
    resource.setrlimit(resource.RLIMIT_AS, (cap, before[1]))
    try:
        yield allowed / 2**30
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


def machine() -> dict:
    """The machine a record was measured on: CPU, cores, memory, Python, torch and its threads, the GPU
    (None without CUDA). Imports torch."""
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "memory_gib": round(physical_memory_bytes() / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def run_json(cmd: Sequence[str], *, env: dict | None = None):
    """Run a worker process (`cmd`) and return the JSON of the last line it printed; a failure raises
    RuntimeError("failed: <the end of its stderr>"), which the caller records as the row's `skipped`."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        raise RuntimeError(f"failed: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def worker_row(cmd: Sequence[str], row: dict) -> dict:
    """The JSON row a measured process (`cmd`) printed last, or `row` with its `skipped` saying why it
    printed none (the signal that killed it, or the end of its stderr)."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    why = f"signal {-done.returncode}" if done.returncode < 0 else done.stderr.strip()[-200:]
    return {**row, "skipped": f"failed ({why})"}


def kept_rows(out: str | Path, keep: bool, planned: set, key: Callable[[dict], tuple]) -> list[dict]:
    """--keep's rows: those of an existing `out` whose `key(row)` this run does not measure (not in
    `planned`); [] without --keep or without the file."""
    if not keep or not Path(out).is_file():
        return []
    return [r for r in read_record(Path(out))["rows"] if key(r) not in planned]


# --- the JSON -----------------------------------------------------------------------------------------


def make_record(benchmark: str, **fields) -> dict:
    """The record of a run: its name, SCHEMA_VERSION, the time now (UTC), `machine()`, then `fields` (the
    script's own, `rows` among them) in the order given."""
    return {
        "benchmark": benchmark,
        "schema_version": SCHEMA_VERSION,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        **fields,
    }


def write_record(out: str | Path, benchmark: str, **fields) -> Path:
    """`make_record(benchmark, **fields)` written atomically to `out` (its folder made), said on stdout."""
    path = write_json(out, make_record(benchmark, **fields))
    print(f"wrote {path}")
    return path


def write_json(out: str | Path, data: dict) -> Path:
    """`data` as indented JSON, written atomically (a half-written file never replaces a whole one)."""
    return atomic_write_text(out, json.dumps(data, indent=1) + "\n")


def read_record(path: str | Path) -> dict:
    """A record written by any version of these scripts, with `schema_version` set (0 where the file
    predates it); a newer version than this code knows is refused."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    version = data.setdefault("schema_version", 0)
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"{path} has benchmark schema_version {version}, newer than this checkout's {SCHEMA_VERSION}: "
            "update benchmarks/ (git pull) or rerun the benchmark"
        )
    return data


# --- the printed table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A column of `table`: `header`, the cell's value (`get`: a row's key, or a function of the row),
    its format spec (`fmt`, e.g. ".3f") and alignment (">" right, "<" left). A value of None prints "-"."""

    header: str
    get: str | Callable[[dict], object]
    fmt: str = ""
    align: str = ">"

    def cell(self, row: dict) -> str:
        value = row[self.get] if isinstance(self.get, str) else self.get(row)
        return "-" if value is None else format(value, self.fmt)


def table(rows: Sequence[dict], columns: Sequence[Column]) -> str:
    """The rows as a text table, each column as wide as its widest cell. A row with a `skipped` reason
    shows the columns it can (up to the first it lacks) and then the reason."""
    cells = []
    for row in rows:
        line = []
        for col in columns:
            try:
                line.append(col.cell(row))
            except (KeyError, TypeError, ZeroDivisionError):
                if "skipped" not in row:
                    raise
                break
        cells.append(line)
    widths = [
        max([len(c.header)] + [len(line[i]) for line in cells if i < len(line)])
        for i, c in enumerate(columns)
    ]
    out = [" ".join(f"{c.header:{c.align}{w}}" for c, w in zip(columns, widths, strict=True)).rstrip()]
    for row, line in zip(rows, cells, strict=True):
        text = " ".join(f"{v:{c.align}{w}}" for v, c, w in zip(line, columns, widths, strict=False))
        out.append((f"{text}  skipped: {row['skipped']}" if "skipped" in row else text).rstrip())
    return "\n".join(out)
