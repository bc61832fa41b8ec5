"""A recorded generate() against a plain one: time, time per decode step and peak memory on CPU.

    python benchmarks/generate_cpu.py [--model smollm2] [--lengths 4096 16384] [--new 64] [--threads 2]
                                      [--modes plain recorder span_mass entropy eager] [--rounds 1]
                                      [--out benchmarks/results/generate_cpu.json] [--keep]

Greedy `generate()` of `--new` tokens after a prompt of the first `length` tokens of the bundled corpus
(austen:persuasion), float32, each (mode, length) in a fresh process so its peak RSS (ru_maxrss) is its
own, after an untimed warm-up generate of 8 tokens after 256:
  plain     the model on sdpa, nothing recorded: the baseline
  recorder  `GenerationRecorder(model, stats=("entropy",))` around generate: every generated token's
            entropy per layer and head
  span_mass `GenerationRecorder(model, stats=("entropy", "span_mass"))`: a row-slice statistic too (its
            prompt and generated spans), summed in the row pass (native, torch_chunked) as key ranges
  entropy   `EntropyRecorder(model, stats=("entropy",))` around generate (per-position sums across
            decode steps: what the issue measured)
  eager     the model on eager attention with `generate(output_attentions=True,
            return_dict_in_generate=True)`: the (layers, heads, T, S) maps of every step, what attention
            tools read today; its address space capped at 90% of the memory available, so maps that do
            not fit fail as "out of memory" instead of swapping
Each row: the total time, the prefill's (the first forward) and the mean decode step's (the others),
the ratio to plain at that length, and the peak RSS; with `--rounds R`, the modes run R times
interleaved (every mode once per round) and each keeps its fastest round (a busy moment of the machine
costs one round, not the ratio). The JSON is written after every row; `--keep` keeps
the rows of the existing `--out` that this run does not measure (a longer length for one mode alone:
`--lengths 32768 --modes recorder --keep`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import (
    Column,
    capped_address_space,
    kept_rows,
    make_record,
    parser,
    peak_rss_mb,
    table,
    worker_row,
    write_json,
)

MODES = ("plain", "recorder", "span_mass", "entropy", "eager")
RECORDED = {"recorder": ("entropy",), "span_mass": ("entropy", "span_mass")}  # GenerationRecorder's stats
LENGTHS = (4096, 16384)
CORPUS = "austen:persuasion"


def worker(model_name: str, mode: str, length: int, new: int, threads: int) -> dict:
    """Inside each measured process: load, warm up, time one generate with per-forward timestamps (eager
    with its address space capped, so maps that do not fit fail as out of memory instead of swapping)."""
    with capped_address_space() if mode == "eager" else contextlib.nullcontext():
        return timed_generate(model_name, mode, length, new, threads)


def timed_generate(model_name: str, mode: str, length: int, new: int, threads: int) -> dict:
    import torch

    from entropy_lens import EntropyRecorder, GenerationRecorder, load_model
    from entropy_lens.data import load_documents

    torch.set_num_threads(threads)
    lm = load_model(model_name, dtype="float32", device="cpu")
    model = lm.model
    if mode == "eager":
        model.set_attn_implementation("eager")
    ids = lm.tokenizer.encode(load_documents(CORPUS)[0][0], add_special_tokens=False)[:length]
    if len(ids) < length:
        raise ValueError(f"{CORPUS} has {len(ids):,} tokens, fewer than {length:,}")
    stamps: list[float] = []
    model.register_forward_pre_hook(lambda *a: stamps.append(time.perf_counter()))

    def run(prompt, tokens):
        kw = {"max_new_tokens": tokens, "do_sample": False, "pad_token_id": lm.tokenizer.eos_token_id}
        kw |= {"min_new_tokens": tokens}
        if mode == "eager":
            kw |= {"output_attentions": True, "return_dict_in_generate": True}
        recorder = {"entropy": EntropyRecorder}.get(mode, GenerationRecorder if mode in RECORDED else None)
        with torch.no_grad():
            if recorder is None:
                return model.generate(prompt, **kw)
            with recorder(model, stats=RECORDED.get(mode, ("entropy",))):
                return model.generate(prompt, **kw)

    run(torch.tensor([ids[:256]]), 8)  # warm-up: imports, the native kernel, the allocator
    stamps.clear()
    started = time.perf_counter()
    try:
        run(torch.tensor([ids]), new)
    except (RuntimeError, MemoryError) as err:
        return {"mode": mode, "length": length, "skipped": f"out of memory ({str(err).splitlines()[0][:80]})"}
    total = time.perf_counter() - started
    prefill = stamps[1] - stamps[0] if len(stamps) > 1 else total
    steps = [b - a for a, b in itertools.pairwise(stamps[1:])]
    return {
        "mode": mode,
        "length": length,
        "new": new,
        "total_s": round(total, 3),
        "prefill_s": round(prefill, 3),
        "step_ms": round(1000 * sum(steps) / max(len(steps), 1), 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def main() -> None:
    ap = parser(__doc__, "generate_cpu")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; each mode keeps its fastest")
    ap.add_argument("--keep", action="store_true", help="keep the rows of --out this run does not measure")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        mode, length = args.worker[0], int(args.worker[1])
        print(json.dumps(worker(args.model, mode, length, args.new, args.threads)))
        return
    planned = set(itertools.product(args.modes, args.lengths))
    kept = kept_rows(args.out, args.keep, planned, lambda r: (r["mode"], r["length"]))
    best: dict[tuple, dict] = {}  # (mode, length) -> its fastest round
    for _round in range(args.rounds):
        for length in args.lengths:
            for mode in args.modes:
                cmd = [sys.executable, __file__, "--model", args.model, "--new", str(args.new)]
                cmd += ["--threads", str(args.threads), "--worker", mode, str(length)]
                row = worker_row(cmd, {"mode": mode, "length": length})
                held = best.get((mode, length))
                if held is None or "total_s" in row and row["total_s"] < held.get("total_s", float("inf")):
                    best[mode, length] = row
                rows = kept + _against_plain(list(best.values()))
                record = make_record(
                    "generate_cpu",
                    model=args.model,
                    new=args.new,
                    threads=args.threads,
                    rounds=args.rounds,
                    rows=rows,
                )
                write_json(args.out, record)
                print(json.dumps(row), flush=True)
    print(table(rows, COLUMNS))


def _against_plain(rows: list[dict]) -> list[dict]:
    """`rows` with each measured row's ratios to plain at its length (total and decode step)."""
    plain = {r["length"]: r for r in rows if r["mode"] == "plain" and "total_s" in r}
    for row in rows:
        base = plain.get(row["length"])
        if base is not None and "total_s" in row and row["mode"] != "plain":
            row["vs_plain"] = round(row["total_s"] / base["total_s"], 3)
            row["step_vs_plain"] = round(row["step_ms"] / base["step_ms"], 3)
    return rows


COLUMNS = (
    Column("length", "length"),
    Column("mode", "mode", align="<"),
    Column("total s", "total_s", ".2f"),
    Column("prefill s", "prefill_s", ".2f"),
    Column("step ms", "step_ms", ".1f"),
    Column("× plain", lambda r: r.get("vs_plain"), ".2f"),
    Column("step × plain", lambda r: r.get("step_vs_plain"), ".2f"),
    Column("peak MB", "peak_rss_mb", ".0f"),
)

if __name__ == "__main__":
    main()
