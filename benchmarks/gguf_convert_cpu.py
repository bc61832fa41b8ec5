"""The bundled SmolLM2's first-use conversion, GGUF to a float32 cache folder, timed on CPU.

    python benchmarks/gguf_convert_cpu.py [--model smollm2] [--threads 2] [--repeats 1]
                                          [--out benchmarks/results/gguf_convert_cpu.json]

What a first `load_model("smollm2")` waits for once per transformers version (models/gguf.py's
`convert_gguf`: transformers dequantises every tensor and the tokenizer is read from the GGUF, then both
are saved), each repeat in a fresh process into a temporary folder (the user's cache is never touched),
and, in that process after it, the tokenizer's part alone (AutoTokenizer from the GGUF). The record's
`seconds` (the fastest and slowest conversion) is the range models/gguf.py's line states
(`CONVERSION_S`, tests/benchmarks/test_gguf_convert.py holds them together) and the documentation's
pages quote (benchmarks/readme_tables.py writes their marked lines).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import make_record, parser, worker_row, write_json


def worker(model_name: str, threads: int) -> dict:
    """Inside each measured process: one conversion into a temporary folder, then the tokenizer alone."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    from entropy_lens.models.bundled import BUNDLED_MODELS
    from entropy_lens.models.gguf import convert_gguf
    from entropy_lens.progress import every_bar_off

    torch.set_num_threads(threads)
    gguf = BUNDLED_MODELS[model_name].path()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        convert_gguf(gguf, Path(tmp) / "converted")
        total = time.perf_counter() - started
    started = time.perf_counter()
    with every_bar_off():
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    tokenizer = time.perf_counter() - started
    return {
        "transformers": transformers.__version__,
        "convert_s": round(total, 1),
        "tokenizer_s": round(tokenizer, 1),
    }


def main() -> None:
    ap = parser(__doc__, "gguf_convert_cpu", repeats=1)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.model, args.threads)))
        return
    rows = []
    for repeat in range(args.repeats):
        cmd = [sys.executable, __file__, "--model", args.model, "--threads", str(args.threads), "--worker"]
        rows.append(worker_row(cmd, {"repeat": repeat}))
    times = [r["convert_s"] for r in rows if "convert_s" in r]
    if not times:
        raise SystemExit(f"no conversion finished: {rows}")
    seconds = [min(times), max(times)]
    write_json(
        args.out,
        make_record("gguf_convert_cpu", model=args.model, threads=args.threads, seconds=seconds, rows=rows),
    )
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
