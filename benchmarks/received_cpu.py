"""What attention received by each key costs on CPU, against eager attention's column sums (SmolLM2-135M).

    python benchmarks/received_cpu.py [--model smollm2] [--lengths 2048 4096 8192]
                                      [--scan-lengths 8192 16384] [--repeats 3] [--modes plain ...]
                                      [--out benchmarks/results/received_cpu.json]

The key statistics (`received`, `received_max`, `received_mean`: statistics.KEY_STATISTICS) are
computed without the T × T matrix: a column pass per layer that reuses the row pass's log-sum-exp
(capture/received.py). What users do today (NVIDIA kvpress's ObservedAttentionPress, H2O) is eager
attention with `output_attentions=True` and a column sum of each layer's (B, H, T, T) probabilities.
Four modes, each (mode, length) in a fresh process so its peak RSS (ru_maxrss) is its own; every mode
runs the decoder on the first `length` tokens of the bundled corpus (no logits: they cost the same in
every mode and no statistic needs them, so the ratios below are the strict ones):
  plain     the decoder with sdpa, no capture: the baseline
  recorder  the same forward inside `EntropyRecorder(model, stats="entropy")` (its default route)
  received  inside `EntropyRecorder(model, stats=("entropy", "received"))`; received / recorder is what
            the key statistics cost
  eager     attn_implementation="eager", `output_attentions=True`, and per layer the column sum over
            the query rows (kvpress, H2O). Its child caps its address space at 90% of the memory
            available (Linux), so maps that do not fit fail there with an allocation error (after
            filling that memory layer by layer) instead of swapping: the row says "out of memory",
            the layer it stopped in and the size the maps need (layers × heads × T² × 4 bytes); a
            child killed by a signal says so too, and longer lengths are not run.
Reported per row: the median wall time of `repeats` runs after one warm-up run at the same length
(under `--fused auto` the recorder times its two routes on the warm-up, as a scan does on its first
sample), the process's peak RSS and its RSS after loading the model, the ratios of the time to
recorder's and plain's at the same length, the threads torch used and the attention paths that ran.
The check: at the smallest length where eager runs, `received` row's array (layers, heads, keys) against
eager's column sums, the largest absolute difference and the largest relative to the sum (a sum reaches
~T at a sink key, where float32 rounding alone is ~T·1e-7); they must agree (relative ≤ 1e-4, in
practice ~1e-5), else the script says so and exits 1.

The issue's target, "a scan with --stats received ≤ 1.4× a scan without at 8K and 16K", is measured on
the scan's per-sample work, the recorder's forward (`scan --stats received` runs exactly this capture
per batch), without its chunked loss: recorder and received at `--scan-lengths` (those already in
`--lengths` are not run twice), in `summary.scan`. The loss adds the same seconds to both, so the
scan's ratio is at most this one.

The JSON is written after every row, so a run cut short keeps what it measured; a table is printed at
the end, and the benchmarks page's table is made from the JSON (benchmarks/readme_tables.py).
Duration at the defaults (estimated from scan_cpu.json's SmolLM2 timings, not measured): about 30 to 40
minutes on 2 quiet cores, most of it the 16K rows. Eager's maps need 4.2, 16.9 and 67.5 GiB at 2K, 4K
and 8K: on a 24 GiB machine it runs at 2K, at 4K only if nothing else holds much memory, never at 8K.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, capped_address_space, make_record, parser, peak_rss_mb, table, timed, write_json

MODES = ("plain", "recorder", "received", "eager")
SCAN_MODES = ("recorder", "received")  # the scan's comparison: entropy alone against entropy + received
STATS = {"recorder": "entropy", "received": ("entropy", "received")}
LENGTHS = (2048, 4096, 8192)
SCAN_LENGTHS = (8192, 16384)
TARGET = 1.4  # the issue's: a scan with --stats received at most 1.4x one without
AGREE = 1e-4  # the largest relative difference of received from eager's column sums that passes


def worker(model_name: str, mode: str, length: int, repeats: int, npy: str) -> dict:
    """Inside each measured process: load, warm up at `length`, time `repeats` runs and return the row;
    `received` and `eager` save their last run's attention received (layers, heads, keys) float64 to
    `npy`. An eager run that does not fit in memory returns the row that says where it stopped."""
    import numpy as np
    import torch

    from entropy_lens.capture import EntropyRecorder, forward_hidden
    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model

    lm = load_model(model_name)
    model = lm.model
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    chunk = token_chunks(lm.tokenizer, "austen", length=length, samples=1, seed=0)
    ids = torch.from_numpy(chunk.ids)[:, :length]
    model.set_attn_implementation("eager" if mode == "eager" else "sdpa")
    rss_loaded = peak_rss_mb()
    shape = {"mode": mode, "len": length, "layers": layers, "heads": heads}
    paths: set[str] = set()
    made = []  # eager: the layers whose maps the current run has made
    last = []

    def run() -> None:
        made.clear()
        with torch.no_grad():
            if mode == "plain":
                forward_hidden(model, ids)
            elif mode == "eager":
                out = model.get_decoder()(input_ids=ids, use_cache=False, output_attentions=True)
                last[:] = [torch.stack([maps[0].sum(-2) for maps in out.attentions])]  # (L, H, keys)
            else:
                with EntropyRecorder(model, stats=STATS[mode]) as rec:
                    forward_hidden(model, ids)
                paths.update(rec.session.paths)
                last[:] = [rec.received("received")] if mode == "received" else []

    cap = capped_address_space() if mode == "eager" else contextlib.nullcontext()
    with cap as available:
        if mode == "eager":
            for layer in model.get_decoder().layers:
                layer.self_attn.register_forward_hook(lambda *_: made.append(1))
        try:
            run()  # the warm-up, at the same length: the allocator, a native kernel's build, auto's trial
            paths.clear()  # the timed runs' paths only
            timing = timed(run, repeats=repeats, warmup=0)
        except (MemoryError, RuntimeError) as err:
            if mode != "eager" or not (isinstance(err, MemoryError) or "alloc" in str(err).lower()):
                raise
            last.clear()
            where = f"in layer {len(made) + 1} of {layers}"
            return {
                **shape,
                "skipped": out_of_memory(where, layers, heads, length, available),
                "stopped_in_layer": len(made) + 1,
                "needed_gib": maps_gib(layers, heads, length),
                "peak_rss_mb": peak_rss_mb(),
            }
    if last:
        np.save(npy, np.asarray(last[-1], dtype=np.float64))
    return {
        **shape,
        "median_s": timing.median,
        "times_s": timing.times,
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_load_mb": rss_loaded,
        "threads": torch.get_num_threads(),
        **({"paths": sorted(paths)} if paths else {}),
        **({"needed_gib": maps_gib(layers, heads, length)} if mode == "eager" else {}),
    }


def maps_gib(layers: int, heads: int, length: int) -> float:
    """GiB of every layer's float32 (heads, T, T) probabilities, what output_attentions keeps."""
    return layers * heads * length * length * 4 / 2**30


def out_of_memory(where: str, layers: int, heads: int, length: int, available: float | None) -> str:
    """The row's text where eager attention did not fit: where it stopped and what its maps need."""
    had = "" if available is None else f", {available:.1f} GiB were available"
    return (
        f"out of memory {where}: the maps need {maps_gib(layers, heads, length):.1f} GiB "
        f"({layers} layers × {heads} heads × {length}² × 4 B){had}"
    )


def measure(model: str, mode: str, length: int, repeats: int, npy: Path, shape: dict) -> dict:
    """One (mode, length) in its own process: its row, or a row saying why there is none (a child killed
    by a signal: out of memory, with the size eager's maps need where `shape` knows layers and heads)."""
    cmd = [sys.executable, __file__, "--model", model, "--repeats", str(repeats)]
    proc = subprocess.run(
        [*cmd, "--worker", mode, str(length), str(npy)], capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return killed_row(mode, length, proc.returncode, proc.stderr, shape)


def killed_row(mode: str, length: int, returncode: int, stderr: str, shape: dict) -> dict:
    """The row of a child that failed: killed by a signal (the OOM killer's SIGKILL) reads as out of
    memory, with eager's maps' size where `shape` holds layers and heads; any other failure its stderr."""
    row = {"mode": mode, "len": length}
    if returncode >= 0:
        return {**row, "skipped": f"failed: {stderr.strip()[-300:]}"}
    if returncode != -9:  # SIGKILL: what the OOM killer sends
        return {**row, "skipped": f"killed by signal {-returncode}"}
    where = "(killed by signal 9)"
    if mode != "eager" or not shape:
        return {**row, "skipped": f"out of memory {where}"}
    layers, heads = shape["layers"], shape["heads"]
    text = out_of_memory(where, layers, heads, length, None)
    return {**row, "skipped": text, "needed_gib": maps_gib(layers, heads, length)}


def compare(row: dict, received: Path, eager: Path) -> None:
    """Put into `row` (received's) how far its array is from eager's column sums: the largest absolute
    difference, the largest relative to the sum (|Δ| / max(1, sum)), the length, and whether they agree."""
    import numpy as np

    ours, theirs = np.load(received), np.load(eager)
    diff = np.abs(ours - theirs)
    row["max_abs_received_diff"] = float(diff.max())
    row["max_rel_received_diff"] = float((diff / np.maximum(1.0, np.abs(theirs))).max())
    row["agrees_with_eager"] = row["max_rel_received_diff"] <= AGREE


def add_ratios(row: dict, rows: list[dict]) -> None:
    """The row's time over recorder's and plain's at its length (None where that one has no time)."""
    by = {(r["mode"], r["len"]): r for r in [*rows, row] if "median_s" in r}
    for base in ("recorder", "plain"):
        other = by.get((base, row["len"]))
        row[f"time_over_{base}"] = row["median_s"] / other["median_s"] if other else None


def summary(rows: list[dict], scan_lengths: list[int]) -> dict:
    """received over recorder at each scan length both ran (against TARGET), and the check's numbers."""
    by = {(r["mode"], r["len"]): r for r in rows if "median_s" in r}
    scan = []
    for n in scan_lengths:
        if ("received", n) in by and ("recorder", n) in by:
            x = by[("received", n)]["median_s"] / by[("recorder", n)]["median_s"]
            scan.append({"len": n, "received_over_recorder": x, "within_target": x <= TARGET})
    check = next(
        (
            {k: r[k] for k in ("len", "max_abs_received_diff", "max_rel_received_diff", "agrees_with_eager")}
            for r in rows
            if "max_abs_received_diff" in r
        ),
        None,
    )
    return {"target": TARGET, "scan": scan, "check": check}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "received_cpu", repeats=3)
    ap.add_argument("--model", default="smollm2", help="a model `scan` loads (default: the bundled SmolLM2)")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="every mode's lengths")
    ap.add_argument(
        "--scan-lengths",
        type=int,
        nargs="*",
        default=list(SCAN_LENGTHS),
        help="recorder and received only: the scan target's lengths",
    )
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="the modes to run")
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "LEN", "NPY"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        mode, length, npy = args.worker
        print(json.dumps(worker(args.model, mode, int(length), args.repeats, npy)))
        return 0

    lengths = sorted(set(args.lengths))
    plan = [(n, mode) for n in lengths for mode in MODES if mode in args.modes]
    scan_only = sorted(set(args.scan_lengths) - set(lengths))
    plan += [(n, mode) for n in scan_only for mode in SCAN_MODES if mode in args.modes]
    rows: list[dict] = []
    shape: dict = {}  # layers and heads, from the first row that ran
    eager_stopped = None  # the first length where eager did not fit: longer ones are not run
    checked = False  # received against eager, at the smallest length where eager ran
    with tempfile.TemporaryDirectory() as tmp:
        for length, mode in plan:
            npy = Path(tmp, f"{mode}-{length}.npy")
            if mode == "eager" and eager_stopped is not None:
                row = {"mode": mode, "len": length, "skipped": f"not run: out of memory at {eager_stopped:,}"}
                if shape:
                    row["needed_gib"] = maps_gib(shape["layers"], shape["heads"], length)
                    row["skipped"] += f"; the maps need {row['needed_gib']:.1f} GiB"
            else:
                row = measure(args.model, mode, length, args.repeats, npy, shape)
            shape = shape or {k: row[k] for k in ("layers", "heads") if k in row}
            if "median_s" in row:
                add_ratios(row, rows)
            received = Path(tmp, f"received-{length}.npy")
            if mode == "eager" and not checked and npy.is_file() and received.is_file():
                compare(next(r for r in rows if (r["mode"], r["len"]) == ("received", length)), received, npy)
                checked = True
            if mode == "eager" and "skipped" in row and eager_stopped is None:
                eager_stopped = length
            rows.append(row)
            print(_line(row), flush=True)
            record = make_record(
                "received_cpu",
                model=args.model,
                repeats=args.repeats,
                rows=rows,
                summary=summary(rows, args.scan_lengths),
            )
            write_json(args.out, record)  # after every row: a run cut short keeps what it measured
    print("\n" + table(rows, COLUMNS))
    print(f"wrote {args.out}")
    check = record["summary"]["check"]
    if check is not None and not check["agrees_with_eager"]:
        print(f"received disagrees with eager's column sums: {check}", file=sys.stderr)
        return 1
    return 0


def _line(r: dict) -> str:
    if "skipped" in r:
        return f"  {r['mode']:>8} len {r['len']}: skipped ({r['skipped'][:160]})"
    return f"  {r['mode']:>8} len {r['len']}: {r['median_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB"


COLUMNS = [
    Column("len", "len"),
    Column("mode", "mode", align="<"),
    Column("median s", "median_s", ".2f"),
    Column("x recorder", "time_over_recorder", ".2f"),
    Column("x plain", "time_over_plain", ".2f"),
    Column("peak RSS MB", "peak_rss_mb", ".0f"),
    Column("max |Δ received|", lambda r: r.get("max_abs_received_diff"), ".1e"),
    Column("relative", lambda r: r.get("max_rel_received_diff"), ".1e"),
    Column("path", lambda r: "+".join(r.get("paths", [])), align="<"),
]


if __name__ == "__main__":
    sys.exit(main())
