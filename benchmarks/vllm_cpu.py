"""The lens inside vLLM against plain vLLM on CPU, beside Hugging Face's generate() with and without the
GenerationRecorder: time and peak memory of one request.

    python benchmarks/vllm_cpu.py [--lengths 4096 16384] [--new 64] [--modes vllm vllm-off vllm-lens hf hf-recorder]
                                  [--out benchmarks/results/vllm_cpu.json] [--keep]

Run with .venv's Python (`make vllm-env` first): the vLLM rows run in .venv-vllm's, the HF rows in this
one's (benchmarks/generate_cpu.py's own worker). One greedy request of `--new` tokens (ignore_eos) after
a prompt of the first `length` tokens of the bundled corpus (austen:persuasion) through SmolLM2 (the
bundled GGUF's converted folder), float32, each (mode, length) in a fresh process so its peak RSS is its
own, after an untimed warm-up request of 8 tokens after 256:
  vllm        `LLM(folder)`, no lens: the baseline
  vllm-off    the engine with the lens (`entropy_lens.vllm.engine_args`), the request not opting in:
              what other tenants pay
  vllm-lens   the engine with the lens, the request opting in with entropy and max_prob
  hf          transformers' generate() on sdpa (generate_cpu.py's "plain")
  hf-recorder generate() inside `GenerationRecorder(model, stats=("entropy",))` (generate_cpu.py's
              "recorder")
The vLLM engine holds a KV cache sized to the request (kv_cache_memory_bytes), chunked prefill at its
default batch of tokens, enforce_eager. Each row: the total time, the ratio to vllm (to hf for
hf-recorder) at that length, and the peak RSS.
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
    os.environ.setdefault(
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1"
    )  # 16K past SmolLM2's 8K, as HF's generate runs
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
    out = tempfile.mkdtemp(prefix="vllm-lens-bench-")
    llm = LLM(folder, **(engine if mode == "vllm" else lens.engine_args(out=out, **engine)))
    extra = lens.request(stats=STATS) if mode == "vllm-lens" else None

    def run(prompt, tokens):
        params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True, extra_args=extra)
        return llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)

    run(ids[:256], 8)  # warm-up
    started = time.perf_counter()
    (output,) = run(ids, new)
    total = time.perf_counter() - started
    if mode == "vllm-lens":  # the statistics are there, and whole
        result = lens.load(out, output.request_id)
        assert result.stat("entropy").shape[1] == new, result.stat("entropy").shape
    return {
        "mode": mode,
        "length": length,
        "new": new,
        "total_s": round(total, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def main() -> None:
    ap = parser(__doc__, "vllm_cpu")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
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
    rows = kept_rows(args.out, args.keep, planned, lambda r: (r["mode"], r["length"]))
    for length, mode in itertools.product(args.lengths, args.modes):
        if mode in HF_MODES:
            cmd = [sys.executable, str(ROOT / "benchmarks" / "generate_cpu.py"), "--model", "smollm2"]
            cmd += ["--new", str(args.new), "--threads", "2", "--worker", HF_MODES[mode], str(length)]
        else:
            cmd = [str(VLLM_PYTHON), __file__, "--new", str(args.new), "--worker", folder, mode, str(length)]
        row = worker_row(cmd, {"mode": mode, "length": length})
        row = {k: v for k, v in row.items() if k not in ("prefill_s", "step_ms")} | {"mode": mode}
        base = "hf" if mode == "hf-recorder" else "vllm"
        ref = next((r for r in rows if r["mode"] == base and r["length"] == length and "total_s" in r), None)
        if ref is not None and "total_s" in row and mode != base:
            row["vs_base"] = round(row["total_s"] / ref["total_s"], 3)
        rows.append(row)
        write_json(
            args.out, make_record("vllm_cpu", model="smollm2", new=args.new, stats=list(STATS), rows=rows)
        )
        print(json.dumps(row), flush=True)
    print(table(rows, COLUMNS))


COLUMNS = (
    Column("length", "length"),
    Column("mode", "mode", align="<"),
    Column("total s", "total_s", ".2f"),
    Column("× vllm (hf)", lambda r: r.get("vs_base"), ".3f"),
    Column("peak MB", "peak_rss_mb", ".0f"),
)

if __name__ == "__main__":
    main()
