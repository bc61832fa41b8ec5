"""The lens inside vLLM against plain vLLM on CPU, beside Hugging Face's generate() with and without the
GenerationRecorder: time and peak memory of one request.

    python benchmarks/vllm_cpu.py [--lengths 4096 16384] [--new 64] [--rounds 2]
                                  [--modes vllm vllm-off vllm-lens hf hf-recorder]
                                  [--out benchmarks/results/vllm_cpu.json] [--keep]

Run with .venv's Python (`make vllm-env` first): the vLLM rows run in .venv-vllm's, the HF rows in this
one's (benchmarks/generate_cpu.py's own worker). One greedy request of `--new` tokens (ignore_eos) after
a prompt of the first `length` tokens of the bundled corpus (austen:persuasion) through SmolLM2 (the
bundled GGUF's converted folder), float32, each (mode, length) in a fresh process so its peak RSS is its
own, after an untimed warm-up request of 8 tokens after 256; `--rounds` rounds, the modes interleaved
within each (so a slow minute of the machine falls on every mode alike), each row the fastest of its
rounds (all of them kept in `rounds_s`):
  vllm        `LLM(folder)`, no lens: the baseline
  vllm-off    the engine with the lens (`entropy_lens.vllm.engine_args`), the request not opting in:
              what other tenants pay
  vllm-lens   the engine with the lens, the request opting in with entropy and max_prob; the same
              request not opting in is timed first in the same engine (`same_engine_off_s`), so
              `vs_same_engine` is the lens's own cost, free of the noise between processes
  hf          transformers' generate() on sdpa (generate_cpu.py's "plain")
  hf-recorder generate() inside `GenerationRecorder(model, stats=("entropy",))` (generate_cpu.py's
              "recorder")
The vLLM engine holds a KV cache sized to the request (kv_cache_memory_bytes), chunked prefill at its
default batch of tokens, enforce_eager. Past SmolLM2's 8,192 positions, vLLM's rotary table (built to
max_position_embeddings, the model's keys past it not finite) is built to the request's length
(hf_overrides), as HF's rotary embedding computes every position: both sides run the same function.
Each row: the total time, the ratio to vllm (to hf for hf-recorder) at that length, and the peak RSS.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, kept_rows, make_record, parser, peak_rss_mb, table, worker_row, write_json

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MODES = ("vllm", "vllm-off", "vllm-lens", "hf", "hf-recorder")
HF_MODES = {"hf": "plain", "hf-recorder": "recorder"}  # generate_cpu.py's names
LENGTHS = (4096, 16384)
CORPUS = "austen:persuasion"
STATS = ("entropy", "max_prob")


def smollm2_folder() -> Path:
    """The bundled SmolLM2 GGUF's converted Hugging Face folder (converted on first use)."""
    from entropy_lens.models import BUNDLED_MODELS
    from entropy_lens.models.gguf import ensure_gguf_cache

    return ensure_gguf_cache(BUNDLED_MODELS["smollm2"].path())


def vllm_worker(folder: str, mode: str, length: int, new: int) -> dict:
    """Inside a .venv-vllm process: the engine, a warm-up request, one timed request."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: its RSS
    from transformers import AutoConfig, AutoTokenizer
    from vllm import LLM, SamplingParams

    from entropy_lens import vllm as lens
    from entropy_lens.data import load_documents

    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.encode(load_documents(CORPUS)[0][0], add_special_tokens=False)[:length]
    if len(ids) < length:
        raise ValueError(f"{CORPUS} has {len(ids):,} tokens, fewer than {length:,}")
    cfg = AutoConfig.from_pretrained(folder)
    per_token = (
        2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4
    )
    engine = {
        "dtype": "float32",
        "enforce_eager": True,
        "max_model_len": length + new + 16,
        "kv_cache_memory_bytes": int(1.25 * per_token * (length + new + 512)),
    }
    if length + new + 16 > cfg.max_position_embeddings:  # the rotary table to every position asked
        engine["hf_overrides"] = {"max_position_embeddings": length + new + 16}
    out = tempfile.mkdtemp(prefix="vllm-lens-bench-")
    llm = LLM(folder, **(engine if mode == "vllm" else lens.engine_args(out=out, **engine)))
    extra = lens.request(stats=STATS) if mode == "vllm-lens" else None

    def run(prompt, tokens, extra_args):
        params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True, extra_args=extra_args)
        return llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)

    def timed(opted_in: bool):
        started = time.perf_counter()
        (output,) = run(ids, new, extra if opted_in else None)
        return output, round(time.perf_counter() - started, 3)

    run(ids[:256], 8, extra)  # warm-up
    row = {"mode": mode, "length": length, "new": new}
    if mode == "vllm-lens":  # the same request not opting in first, in the same engine: the lens's own cost
        row["same_engine_off_s"] = timed(False)[1]
    output, row["total_s"] = timed(mode == "vllm-lens")
    if mode == "vllm-lens":  # the statistics are there, and whole
        result = lens.load(out, output.request_id)
        assert result.stat("entropy").shape[1] == new, result.stat("entropy").shape
    return row | {"peak_rss_mb": round(peak_rss_mb(), 1)}


def main() -> None:
    ap = parser(__doc__, "vllm_cpu")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument(
        "--rounds", type=int, default=2, help="rounds of every mode, interleaved; each row the fastest"
    )
    ap.add_argument("--keep", action="store_true", help="keep the rows of --out this run does not measure")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        folder, mode, length = args.worker[0], args.worker[1], int(args.worker[2])
        print(json.dumps(vllm_worker(folder, mode, length, args.new)))
        return
    if any(m.startswith("vllm") for m in args.modes) and not VLLM_PYTHON.is_file():
        sys.exit(f"no {VLLM_PYTHON}: build it with `make vllm-env`")
    folder = str(smollm2_folder())
    planned = set(itertools.product(args.modes, args.lengths))
    kept = kept_rows(args.out, args.keep, planned, lambda r: (r["mode"], r["length"]))
    runs: dict[tuple, list[dict]] = {}
    for _ in range(args.rounds):
        for length, mode in itertools.product(args.lengths, args.modes):
            if mode in HF_MODES:
                cmd = [sys.executable, str(ROOT / "benchmarks" / "generate_cpu.py"), "--model", "smollm2"]
                cmd += ["--new", str(args.new), "--threads", "2", "--worker", HF_MODES[mode], str(length)]
            else:
                cmd = [
                    str(VLLM_PYTHON),
                    __file__,
                    "--new",
                    str(args.new),
                    "--worker",
                    folder,
                    mode,
                    str(length),
                ]
            row = worker_row(cmd, {"mode": mode, "length": length})
            runs.setdefault((mode, length), []).append(row)
            print(json.dumps(row), flush=True)
            rows = kept + best_rows(runs, kept)
            write_json(
                args.out,
                make_record(
                    "vllm_cpu",
                    model="smollm2",
                    new=args.new,
                    stats=list(STATS),
                    rounds=args.rounds,
                    rows=rows,
                ),
            )
    print(table(rows, COLUMNS))


def best_rows(runs: dict[tuple, list[dict]], kept: list[dict] = ()) -> list[dict]:
    """One row per (mode, length): the fastest of its rounds (`rounds_s` all of them, peak RSS the
    largest), its ratio to the fastest plain run (vllm; hf for hf-recorder) at that length, measured now
    or among the `kept` rows (--keep); a mode whose every round failed keeps the last round's reason."""
    rows = []
    for (mode, length), measured in runs.items():
        done = [r for r in measured if "total_s" in r]
        if not done:
            rows.append({"mode": mode, "length": length, "skipped": measured[-1]["skipped"]})
            continue
        rows.append(
            {
                "mode": mode,
                "length": length,
                "new": done[0]["new"],
                "total_s": min(r["total_s"] for r in done),
                "rounds_s": [r["total_s"] for r in done],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in done),
            }
        )
        if "same_engine_off_s" in done[0]:  # the lens's own cost: the fastest opted-in over the fastest not
            off = min(r["same_engine_off_s"] for r in done)
            rows[-1] |= {"same_engine_off_s": off, "vs_same_engine": round(rows[-1]["total_s"] / off, 3)}
    for row in rows:
        base = "hf" if row["mode"] == "hf-recorder" else "vllm"
        ref = next(
            (
                r
                for r in [*rows, *kept]
                if (r["mode"], r["length"]) == (base, row["length"]) and "total_s" in r
            ),
            None,
        )
        if ref is not None and "total_s" in row and row["mode"] != base:
            row["vs_base"] = round(row["total_s"] / ref["total_s"], 3)
    return rows


COLUMNS = (
    Column("length", "length"),
    Column("mode", "mode", align="<"),
    Column("total s", "total_s", ".2f"),
    Column("× vllm (hf)", lambda r: r.get("vs_base"), ".3f"),
    Column("× same engine", lambda r: r.get("vs_same_engine"), ".3f"),
    Column("peak MB", "peak_rss_mb", ".0f"),
)

if __name__ == "__main__":
    main()
