"""lm-polygraph's attention estimators fed by its own eager calculators and by the lens: time and peak memory
on CPU, by prompt length. Runs in the lm-polygraph environment (`make polygraph-env`):

    .venv-polygraph/bin/python benchmarks/polygraph_cpu.py [--model smollm2] [--lengths 2048 4096 8192 16384 32768]
                                   [--modes own lens] [--new 16] [--threads 2] [--keep]
                                   [--out benchmarks/results/polygraph_cpu.json]

A prompt of the first `length` tokens of the bundled corpus (austen:persuasion), float32, greedy
generation of `--new` tokens (the end token suppressed, so every text writes them all), each (mode,
length) in a fresh process, its address space capped at 90% of the memory available (maps that do not
fit fail as "out of memory" instead of swapping), so its peak RSS (ru_maxrss) is its own:
  own   lm-polygraph's own route: the model on eager attention, `GreedyProbsCalculator(output_attentions=
        True)` (every step's (layers, heads, T, S) maps: `attention_all`) and `AttentionForwardPassCalculator`
        (the teacher-forced forward's full maps: `forwardpass_attention_weights`), then its RAUQ and
        AttentionScore
  lens  the model on sdpa, `LensGreedyProbsCalculator` and `LensForwardpassDiagonalCalculator`
        (entropy_lens.polygraph: the recorder's kept probabilities and the own-key probability at every
        row, no T × T), then the same RAUQ (lm-polygraph's, unchanged) and AttentionScore (its estimator
        reading the diagonal)
Each row: the greedy calculator's time (generate and attention_all), the forward calculator's, the total,
the peak RSS and both estimators' uncertainties. Where both modes ran at a length with the same greedy
tokens, the lens row holds the uncertainties' relative differences from lm-polygraph's own. The JSON is
written after every row; `--keep` keeps the rows of an existing `--out` that this run does not measure.
"""

from __future__ import annotations

import argparse
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

MODES = ("own", "lens")
LENGTHS = (2048, 4096, 8192, 16384, 32768)
CORPUS = "austen:persuasion"
ESTIMATORS = ("rauq", "attention_score")


def worker(model_name: str, mode: str, length: int, new: int, threads: int) -> dict:
    """Inside each measured process: both calculators and both estimators on one prompt, timed, with the
    address space capped (benchmarks/_bench.py)."""
    with capped_address_space():
        return timed_estimates(model_name, mode, length, new, threads)


def whitebox(model_name: str, mode: str, new: int):
    """lm-polygraph's WhiteboxModel of `model_name` (float32, CPU) on eager (own) or sdpa (lens) attention,
    its end token suppressed so every text writes `new` tokens; and the tokenizer."""
    import torch
    from lm_polygraph import WhiteboxModel

    from entropy_lens import load_model

    lm = load_model(model_name, dtype="float32", device="cpu")
    model, tokenizer = lm.model, lm.tokenizer
    model.set_attn_implementation("eager" if mode == "own" else "sdpa")
    end = tokenizer.eos_token_id

    def no_end(module, args, logits: torch.Tensor) -> torch.Tensor:
        logits[..., end] = logits.amin(-1) - 10.0
        return logits

    model.get_output_embeddings().register_forward_hook(no_end)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    wb = WhiteboxModel(model, tokenizer, model_path=model_name)
    wb.generation_parameters.max_new_tokens = new
    return wb, tokenizer


def calculators(mode: str) -> tuple:
    """(greedy calculator, forward calculator, AttentionScore's class) of `mode`."""
    if mode == "own":
        from lm_polygraph.estimators import AttentionScore
        from lm_polygraph.stat_calculators.attention_forward_pass import AttentionForwardPassCalculator
        from lm_polygraph.stat_calculators.greedy_probs import GreedyProbsCalculator

        return GreedyProbsCalculator(output_attentions=True), AttentionForwardPassCalculator(), AttentionScore
    from entropy_lens.polygraph import LensGreedyProbsCalculator
    from entropy_lens.polygraph.forward import AttentionScore, LensForwardpassDiagonalCalculator

    return LensGreedyProbsCalculator(), LensForwardpassDiagonalCalculator(), AttentionScore


def timed_estimates(model_name: str, mode: str, length: int, new: int, threads: int) -> dict:
    import torch
    from lm_polygraph.estimators import RAUQ

    from entropy_lens.data import load_documents

    torch.set_num_threads(threads)
    wb, tokenizer = whitebox(model_name, mode, new)
    ids = tokenizer.encode(load_documents(CORPUS)[0][0], add_special_tokens=False)[:length]
    if len(ids) < length:
        raise ValueError(f"{CORPUS} has {len(ids):,} tokens, fewer than {length:,}")
    text = tokenizer.decode(ids)
    greedy, forward, attention_score = calculators(mode)
    with torch.no_grad():  # a warm-up: imports, the native kernel, the allocator
        warm = greedy({}, [tokenizer.decode(ids[:64])], wb, max_new_tokens=2)
        forward(warm, [tokenizer.decode(ids[:64])], wb)
    row = {"mode": mode, "length": length, "prompt_tokens": int(wb.tokenize([text])["input_ids"].shape[1])}
    stage, started = "generate", time.perf_counter()
    try:
        with torch.no_grad():
            deps = greedy({}, [text], wb, max_new_tokens=new)
            row["generate_s"] = round(time.perf_counter() - started, 3)
            stage, begun = "forward", time.perf_counter()
            deps |= forward(deps, [text], wb)
            row["forward_s"] = round(time.perf_counter() - begun, 3)
        stage = "estimators"
        deps["model"] = wb
        row["rauq"] = float(RAUQ()(deps)[0])
        row["attention_score"] = float(attention_score()(deps)[0])
    except (RuntimeError, MemoryError) as err:
        row["skipped"] = f"out of memory in {stage} ({str(err).splitlines()[0][:80]})"
        row["peak_rss_mb"] = round(peak_rss_mb(), 1)
        return row
    row["total_s"] = round(time.perf_counter() - started, 3)
    row["new"] = len(deps["greedy_tokens"][0])
    row["tokens"] = [int(t) for t in deps["greedy_tokens"][0]]
    row["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return row


def compared(rows: list[dict]) -> list[dict]:
    """`rows` with each lens row holding its estimators' relative differences from the own row of its
    length, where both ran and wrote the same greedy tokens (`same_tokens` says whether they did)."""
    own = {r["length"]: r for r in rows if r["mode"] == "own" and "total_s" in r}
    for r in rows:
        theirs = own.get(r["length"])
        if r["mode"] != "lens" or "total_s" not in r or theirs is None:
            continue
        r["same_tokens"] = r["tokens"] == theirs["tokens"]
        r["vs_own"] = round(r["total_s"] / theirs["total_s"], 3)
        r["memory_vs_own"] = round(r["peak_rss_mb"] / theirs["peak_rss_mb"], 3)
        if r["same_tokens"]:
            for name in ESTIMATORS:
                r[f"{name}_rel_diff"] = abs(r[name] - theirs[name]) / abs(theirs[name])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "polygraph_cpu")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--keep", action="store_true", help="keep the rows of --out this run does not measure")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        mode, length = args.worker[0], int(args.worker[1])
        print(json.dumps(worker(args.model, mode, length, args.new, args.threads)))
        return 0
    planned = set(itertools.product(args.modes, args.lengths))
    rows = kept_rows(args.out, args.keep, planned, lambda r: (r["mode"], r["length"]))
    for length in args.lengths:
        for mode in args.modes:
            cmd = [sys.executable, __file__, "--model", args.model, "--new", str(args.new)]
            cmd += ["--threads", str(args.threads), "--worker", mode, str(length)]
            row = worker_row(cmd, {"mode": mode, "length": length})
            rows = compared([*rows, row])
            record = make_record(
                "polygraph_cpu", model=args.model, new=args.new, threads=args.threads, rows=rows
            )
            write_json(args.out, record)
            print(json.dumps({k: v for k, v in row.items() if k != "tokens"}), flush=True)
    print(table(rows, COLUMNS))
    return 0


COLUMNS = (
    Column("length", "length"),
    Column("mode", "mode", align="<"),
    Column("generate s", "generate_s", ".2f"),
    Column("forward s", "forward_s", ".2f"),
    Column("total s", "total_s", ".2f"),
    Column("peak MB", "peak_rss_mb", ".0f"),
    Column("RAUQ", "rauq", ".5g"),
    Column("AttentionScore", "attention_score", ".6g"),
)

if __name__ == "__main__":
    sys.exit(main())
