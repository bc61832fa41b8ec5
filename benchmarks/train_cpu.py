"""CPU benchmark: what `AttentionMonitor` adds to a training step (forward, backward, AdamW step).

    python benchmarks/train_cpu.py [--sizes smollm2:2048 smollm2:4096 llama4:1024] [--every 10]
                                   [--steps 3] [--blocks 1] [--rounds 2] [--device cpu|cuda]
                                   [--out benchmarks/results/train_cpu.json]

Models: `smollm2` (the bundled SmolLM2-135M, 30 layers, its own weights, a chunk of the `austen` corpus)
and `llama4` (a 4-layer Llama built here, LLAMA4, random weights seeded with 0, random token ids seeded
with 0); any other name `entropy_lens.models.load_model` knows (e.g. tiny-rope) loads as smollm2 does.
Each (model, length) runs three modes, float32, batch 1, labels = the input ids:

  unmonitored  the model's own attention (sdpa)
  every_step   inside `AttentionMonitor(model)` (its default statistics), every=1: every step records
  every_n      inside `AttentionMonitor(model, every=N)` (--every, default 10): one step in N records

A step is `model(input_ids, labels).loss.backward(); AdamW.step(); zero_grad()`. Each mode runs in its own
process (its peak RSS, ru_maxrss, is its own; on CUDA also the device's max_memory_allocated), the three
processes alternating `--rounds` times (unmonitored, every_step, every_n, unmonitored, ...) so that drift
in the machine's speed reaches all modes alike. In a process: one untimed warm-up step (recorded by both
monitored modes: the native kernel's build, allocator), then timed runs: `--steps` single steps for
unmonitored and every_step (their steps are alike), `--blocks` blocks of N consecutive steps for every_n,
so that each of its runs holds exactly one recorded step (a block's time / N is its time per step).
Reported per mode: the median over all its timed runs (all rounds) of the time per
step, its ratio to unmonitored's, the largest peak RSS of its processes and its ratio to unmonitored's,
the steps the monitor recorded and `paths`, the attention routes that computed the recorded forwards
(capture/paths.py's names: "fused-train" is the native one pass with flash's backward, "sdpa-then-entropy"
sdpa with autograd plus a no-grad statistics pass). Goals (issue 50): every_step <= 1.05x, every_n <=
1.01x, peak memory <= 1.05x. Prints a table and writes JSON; benchmarks/readme_tables.py's train_table
makes the docs' table from it.

Cost of the defaults: 38 training steps per size (2 rounds x (1 + 3, 1 + 3, 1 + 10)) in 18 processes in
all. Estimated (2026-11, from one SmolLM2 2K step of 439 s on the project's 2 cores under a load of ~10,
about 5x contended) at 60-90 s per SmolLM2 2K step on the quiet machine, about twice that at 4K: some
2.5 hours (2 to 3.5), the 4K rows most of it; peak RSS about 5.4 GB at 2K. `--rounds 1` halves it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import nullcontext
from itertools import count
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, parser, peak_rss_mb, run_json, table, timed, write_record

MODES = ("unmonitored", "every_step", "every_n")
DEFAULT_SIZES = ("smollm2:2048", "smollm2:4096", "llama4:1024")
GOALS = {"every_step": 1.05, "every_n": 1.01, "peak": 1.05}  # time / unmonitored's; peak memory / its
# the in-script model: 4 layers, 8 query heads of 64 over 4 KV heads (GQA), SwiGLU 1408, 8K vocabulary
LLAMA4 = {
    "num_hidden_layers": 4,
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 8192,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}


def parse_size(text: str) -> tuple[str, int]:
    """'MODEL:LEN' -> (model, length)."""
    model, sep, length = text.rpartition(":")
    if not sep or not model or not length.isdigit() or int(length) < 2:
        raise argparse.ArgumentTypeError(
            f"--sizes {text!r}: write MODEL:LEN with LEN >= 2 tokens, e.g. smollm2:2048 or llama4:1024"
        )
    return model, int(length)


def build(name: str, length: int):
    """(model in float32, input ids (1, length)) of `name`: llama4 built here, else a loaded model."""
    import torch

    if name == "llama4":
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**LLAMA4, attn_implementation="sdpa"))
        g = torch.Generator().manual_seed(0)
        return model, torch.randint(0, LLAMA4["vocab_size"], (1, length), generator=g)
    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model

    lm = load_model(name)
    ids = token_chunks(lm.tokenizer, "austen", length=length, samples=1, seed=0).ids
    return lm.model, torch.from_numpy(ids)[:, :length]


def monitor_paths(mon) -> list[str]:
    """The attention routes that computed `mon`'s recorded forwards (capture/paths.py's names)."""
    return sorted(mon.paths)


def worker(name: str, length: int, mode: str, every: int, runs: int, device: str) -> dict:
    """One mode's process: the warm-up step, then `runs` timed runs of a step (every_n: of N steps)."""
    import torch

    from entropy_lens import AttentionMonitor

    model, ids = build(name, length)
    model, ids = model.to(device).train(), ids.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else None
    rss_loaded = peak_rss_mb()
    mon = (
        None if mode == "unmonitored" else AttentionMonitor(model, every=1 if mode == "every_step" else every)
    )
    steps = count(1)

    def step(n: int) -> None:
        if mon is not None:
            mon.step = n  # step n records where n is a multiple of the monitor's `every`
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    per_run = every if mode == "every_n" else 1

    def block() -> None:
        for _ in range(per_run):
            step(next(steps))

    with mon if mon is not None else nullcontext():
        step(0)  # the warm-up, recorded by both monitored modes (0 is a multiple of every)
        timing = timed(block, repeats=runs, warmup=0, sync=sync)
    return {
        "model": name,
        "len": length,
        "mode": mode,
        "every": None if mon is None else mon.every,
        "step_times_s": [t / per_run for t in timing.times],  # each run's time per step
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_load_mb": rss_loaded,
        "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "recorded": None if mon is None else mon.recorded,
        "paths": [] if mon is None else monitor_paths(mon),
        "stats": [] if mon is None else list(mon.stats),
        "threads": torch.get_num_threads(),
        "attn_implementation": model.config._attn_implementation,  # the model's own, what unmonitored runs
    }


def size_rows(name: str, length: int, args) -> list[dict]:
    """The three modes of one (model, length), their processes alternating `args.rounds` times."""
    runs = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            cmd = [sys.executable, __file__, "--worker", name, str(length), mode, "--every", str(args.every)]
            timed_runs = args.blocks if mode == "every_n" else args.steps
            cmd += ["--runs", str(timed_runs), "--device", args.device]
            try:
                runs[mode].append(run_json(cmd))
            except RuntimeError as err:
                return [{"model": name, "len": length, "mode": mode, "skipped": str(err)}]
            r = runs[mode][-1]
            print(
                f"  {name} {length} {mode}: {r['step_times_s']} s/step, {r['peak_rss_mb']:.0f} MB", flush=True
            )
    rows = []
    for mode, procs in runs.items():
        first = procs[0]
        times = [t for p in procs for t in p["step_times_s"]]
        rows.append(
            {
                **{
                    k: first[k]
                    for k in ("model", "len", "mode", "every", "stats", "threads", "attn_implementation")
                },
                "step_s": statistics.median(times),
                "step_times_s": times,
                "peak_rss_mb": max(p["peak_rss_mb"] for p in procs),
                "peak_rss_mb_runs": [p["peak_rss_mb"] for p in procs],
                "rss_after_load_mb": max(p["rss_after_load_mb"] for p in procs),
                "peak_gpu_mb": None if first["peak_gpu_mb"] is None else max(p["peak_gpu_mb"] for p in procs),
                "recorded": [p["recorded"] for p in procs],
                "paths": sorted({path for p in procs for path in p["paths"]}),
            }
        )
    base = rows[0]
    for r in rows:
        r["time_over_unmonitored"] = r["step_s"] / base["step_s"]
        r["peak_rss_over_unmonitored"] = r["peak_rss_mb"] / base["peak_rss_mb"]
        gpu = r["peak_gpu_mb"]
        r["peak_gpu_over_unmonitored"] = None if gpu is None else gpu / base["peak_gpu_mb"]
        r["goal"] = GOALS.get(r["mode"])
    return rows


COLUMNS = [
    Column("model", "model", align="<"),
    Column("len", "len"),
    Column("mode", lambda r: r["mode"] if r.get("every") in (None, 1) else f"every {r['every']}", align="<"),
    Column("s/step", "step_s", ".3f"),
    Column("x unmon.", "time_over_unmonitored", ".3f"),
    Column("goal", lambda r: f"<= {r['goal']}" if r.get("goal") else None),
    Column("peak RSS MB", "peak_rss_mb", ".0f"),
    Column("x unmon.", "peak_rss_over_unmonitored", ".3f"),
    Column("peak GPU MB", "peak_gpu_mb", ".0f"),
    Column("recorded", lambda r: ",".join(map(str, r["recorded"])) if r.get("every") else None),
    Column("route", lambda r: "+".join(r["paths"]) or r["attn_implementation"], align="<"),
]


def main(argv=None) -> int:
    ap = parser(__doc__, "train_cpu")
    ap.add_argument("--sizes", type=parse_size, nargs="+", default=[parse_size(s) for s in DEFAULT_SIZES])
    ap.add_argument("--every", type=int, default=10, help="every_n's N: one step in N records")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per unmonitored/every_step process")
    ap.add_argument("--blocks", type=int, default=1, help="timed blocks of N steps per every_n process")
    ap.add_argument("--rounds", type=int, default=2, help="processes per mode, the modes alternating")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (gpu_checks.sh's train stage)")
    ap.add_argument("--worker", nargs=3, metavar=("MODEL", "LEN", "MODE"), help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=1, help=argparse.SUPPRESS)  # a worker's timed runs
    args = ap.parse_args(argv)
    for flag in ("every", "steps", "blocks", "rounds", "runs"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} {getattr(args, flag)}: give 1 or more")
    if args.worker:
        name, length, mode = args.worker
        print(json.dumps(worker(name, int(length), mode, args.every, args.runs, args.device)))
        return 0
    rows = []
    for name, length in args.sizes:
        rows += size_rows(name, length, args)
    print("\n" + table(rows, COLUMNS))
    fields = {"device": args.device, "every": args.every, "steps": args.steps, "blocks": args.blocks}
    fields["rounds"] = args.rounds
    write_record(args.out, "train_cpu", **fields, llama4=LLAMA4, goals=GOALS, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
