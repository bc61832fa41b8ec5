"""kvpress's eager ObservedAttentionPress against the lens press on sdpa: prefill time, memory, kept keys.

    .venv-kvpress/bin/python benchmarks/kvpress_cpu.py [--model smollm2] [--lengths 2048 4096 8192 16384 32768]
                                                       [--ratio 0.5] [--repeats 1]
                                                       [--out benchmarks/results/kvpress_cpu.json]

Runs in the kvpress environment (`make kvpress-env`: kvpress 0.5.5 needs transformers < 5.3). Two
presses and the prefill without one, each (press, length) in a fresh process so its peak RSS (ru_maxrss)
is its own, on the first `length` tokens of the bundled corpus (`load_documents("austen:persuasion")`, as
docs/guides/kvpress.md does), float32 on CPU:
  plain    no press, the model on sdpa: the same prefill, what a press's cost is read against
  kvpress  kvpress's own `ObservedAttentionPress(compression_ratio)`, the model on
           attn_implementation="eager" (the press reads each layer's (B, H, T, T) weights)
  lens     `entropy_lens.kvpress.ObservedAttentionPress(compression_ratio)`, the model on sdpa: inside
           `with press(model):` the capture's pass runs each layer's attention and leaves its keys'
           attention received (on CPU the native kernel's one pass), no weights
  lens-beside  the same press with from_forward=False (not run by default): the model's sdpa as without
           a press, each layer scored by a pass of its own beside it (queries recomputed,
           `attention_received`'s two passes), the press's way before issue 70's item 9
What is timed is the prefill exactly as kvpress's pipeline runs it (`KVPressTextGenerationPipeline.
_forward`: `with press(model): model.model(input_ids=context, past_key_values=DynamicCache())`), without
the pipeline's tokenising, chat template and greedy answer, which cost the same with either press: the
median of `--repeats` runs (default 1: long prefills) after an untimed warm-up prefill of WARMUP tokens
(imports, the native kernel, the allocator). The row says the cache length the press left.
Memory: kvpress's prefill does not ask for `output_attentions`, so each layer's weights (heads × T² × 4
B: `layer_maps_gib`) are dropped before the next layer's; the softmax holds two of them beside the
eager mask (T² × 4 B). The kvpress child caps its address space at 90% of the memory available (Linux;
_bench.py's `capped_address_space`), so weights that do not fit fail there with an allocation error
instead of swapping: the row says "out of memory", the layer it stopped in and the GiB one layer's
weights need; a child killed by a signal says so, and longer lengths are not run for that press.
The check, at every length where both ran: each child saves its press's scores (layers, key heads, keys)
and the keys it kept; the lens row holds the fraction of kvpress's kept (layer, key head, position)
triples the lens press kept too (`kept_agree`, 1.0: the same cache) and the largest difference of the
scores relative to the layer's largest kvpress score (`max_rel_score_diff`). Each press scores its own
prefill's layer inputs (eager against sdpa: float rounding apart, the same); the same-input comparison
is tests/kvpress_cases.py's (1e-4).

The JSON is written after every row; the table is printed at the end, and the benchmarks page's is made
from the JSON (benchmarks/readme_tables.py). Duration at the defaults on 2 cores: 64 minutes on
2026-11-28, 28 of them kvpress's prefill at 16K (one layer's weights: 9.0 GiB, twice that in the
softmax; it peaked at 21.4 GiB of 23.5 and finished, where on 2026-11-26 it ran out of memory in layer 19);
kvpress stops at 32K.
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

PRESSES = ("plain", "kvpress", "lens", "lens-beside")
DEFAULT_PRESSES = ("plain", "kvpress", "lens")
ATTENTION = {"plain": "sdpa", "kvpress": "eager", "lens": "sdpa", "lens-beside": "sdpa"}
LENGTHS = (2048, 4096, 8192, 16384, 32768)
WARMUP = 256  # tokens of the untimed warm-up prefill
CORPUS = "austen:persuasion"


def context_ids(tokenizer, length: int):
    """(1, length) ids: the first `length` tokens of the corpus's first document, as the guide cuts them."""
    import torch

    from entropy_lens.data import load_documents

    text = load_documents(CORPUS)[0][0]
    ids = tokenizer.encode(text, add_special_tokens=False)[:length]
    if len(ids) < length:
        raise ValueError(f"{CORPUS} has {len(ids):,} tokens, fewer than --lengths {length:,}")
    return torch.tensor([ids])


def make_press(name: str, ratio: float):
    """The press `name` at `ratio`; None for the plain prefill."""
    from kvpress import ObservedAttentionPress as KVPressObserved

    from entropy_lens.kvpress import ObservedAttentionPress

    if name == "plain":
        return None
    if name == "kvpress":
        return KVPressObserved(compression_ratio=ratio)
    return ObservedAttentionPress(compression_ratio=ratio, from_forward=name == "lens")


def worker(model_name: str, name: str, length: int, repeats: int, ratio: float, npz: str) -> dict:
    """Inside each measured process: load, warm up, time `repeats` prefills through the press and return
    the row; the last run's scores (layers, key heads, keys) and kept mask are saved to `npz`. A kvpress
    prefill whose weights do not fit returns the row that says where it stopped."""
    import numpy as np
    import torch
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache

    from entropy_lens.models import load_model

    lm = load_model(model_name)
    model = lm.model
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    model.set_attn_implementation(ATTENTION[name])
    ids = context_ids(lm.tokenizer, length)
    press = make_press(name, ratio)
    scores: dict[int, torch.Tensor] = {}
    if press is not None:
        score = press.score

        def keep_scores(module, *args):  # the press's own score, kept per layer (compress takes its top-k)
            out = score(module, *args)
            scores[module.layer_idx] = out
            return out

        press.score = keep_scores
    caches = []

    def prefill(x) -> None:  # kvpress's pipeline's prefill (KVPressTextGenerationPipeline._forward)
        scores.clear()
        cache = DynamicCache()
        with torch.no_grad(), press(model) if press is not None else contextlib.nullcontext():
            model.model(input_ids=x, past_key_values=cache)
        caches[:] = [cache]

    rss_loaded = peak_rss_mb()
    shape = {"press": name, "len": length, "attention": ATTENTION[name], "layers": layers, "heads": heads}
    map_gib = heads * length * length * 4 / 2**30
    extra = {"layer_maps_gib": map_gib} if name == "kvpress" else {}
    cap = capped_address_space() if name == "kvpress" else contextlib.nullcontext()
    with cap as available:
        try:
            prefill(ids[:, : min(WARMUP, length)])
            timing = timed(lambda: prefill(ids), repeats=repeats, warmup=0)
        except (MemoryError, RuntimeError) as err:
            if name != "kvpress" or not (isinstance(err, MemoryError) or "alloc" in str(err).lower()):
                raise
            had = "" if available is None else f", {available:.1f} GiB were available"
            return {
                **shape,
                **extra,
                "skipped": f"out of memory in layer {len(scores) + 1} of {layers}: one layer's weights need "
                f"{map_gib:.1f} GiB ({heads} heads × {length}² × 4 B, two in the softmax){had}",
                "stopped_in_layer": len(scores) + 1,
                "peak_rss_mb": peak_rss_mb(),
            }
    if press is not None:
        all_scores = torch.stack([scores[i][0].float() for i in range(layers)])  # (layers, key heads, keys)
        n_kept = compute_n_kept(length, ratio)
        kept = torch.zeros_like(all_scores, dtype=torch.bool)
        kept.scatter_(-1, all_scores.topk(n_kept, dim=-1).indices, True)  # what ScorerPress.compress keeps
        np.savez(npz, scores=all_scores.numpy(), kept=kept.numpy())
    return {
        **shape,
        **extra,
        "median_s": timing.median,
        "times_s": timing.times,
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_load_mb": rss_loaded,
        "cache_len": caches[0].get_seq_length(),
        "threads": torch.get_num_threads(),
    }


def measure(args, name: str, length: int, npz: Path) -> dict:
    """One (press, length) in its own process: its row, or a row saying why there is none."""
    cmd = [sys.executable, __file__, "--model", args.model, "--repeats", str(args.repeats)]
    cmd += ["--ratio", str(args.ratio), "--worker", name, str(length), str(npz)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return failed_row(name, length, proc.returncode, proc.stderr)


def failed_row(name: str, length: int, returncode: int, stderr: str) -> dict:
    """The row of a child that failed: SIGKILL (the OOM killer's) reads as out of memory, another signal
    says which, any other failure the end of its stderr."""
    row = {"press": name, "len": length}
    if returncode == -9:
        return {**row, "skipped": "out of memory (killed by signal 9)"}
    if returncode < 0:
        return {**row, "skipped": f"killed by signal {-returncode}"}
    return {**row, "skipped": f"failed: {stderr.strip()[-300:]}"}


def compare(row: dict, theirs: Path, ours: Path) -> None:
    """Put into the lens `row` how its scores and kept keys compare with kvpress's at the same length."""
    import numpy as np

    a, b = np.load(theirs), np.load(ours)
    scale = np.abs(a["scores"]).max(axis=(1, 2), keepdims=True)  # each layer's largest kvpress score
    row["max_rel_score_diff"] = float((np.abs(b["scores"] - a["scores"]) / scale).max())
    row["kept_agree"] = float((a["kept"] & b["kept"]).sum() / a["kept"].sum())


def summary(rows: list[dict]) -> list[dict]:
    """Per length where both presses ran: lens over kvpress (time, peak RSS), the check's numbers and, where
    the plain prefill ran too, the lens press over it (`time_over_plain`)."""
    by = {(r["press"], r["len"]): r for r in rows if "median_s" in r}
    out = []
    for (name, n), r in by.items():
        theirs = by.get(("kvpress", n))
        if name == "lens" and theirs is not None:
            keys = ("kept_agree", "max_rel_score_diff", "time_over_plain")
            out.append(
                {
                    "len": n,
                    "time_over_kvpress": r["median_s"] / theirs["median_s"],
                    "rss_over_kvpress": r["peak_rss_mb"] / theirs["peak_rss_mb"],
                    **{k: r[k] for k in keys if k in r},
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "kvpress_cpu", repeats=1)
    ap.add_argument(
        "--model", default="smollm2", help="a model load_model loads (default: the bundled SmolLM2)"
    )
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="context tokens")
    ap.add_argument("--ratio", type=float, default=0.5, help="the presses' compression_ratio")
    ap.add_argument(
        "--presses", nargs="+", default=list(DEFAULT_PRESSES), choices=PRESSES, help="the presses to run"
    )
    ap.add_argument("--worker", nargs=3, metavar=("PRESS", "LEN", "NPZ"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        name, length, npz = args.worker
        print(json.dumps(worker(args.model, name, int(length), args.repeats, args.ratio, npz)))
        return 0

    rows: list[dict] = []
    stopped: dict[str, int] = {}  # press -> the first length it did not run at: longer ones are not run
    with tempfile.TemporaryDirectory() as tmp:
        for length in sorted(set(args.lengths)):
            for name in (p for p in PRESSES if p in args.presses):
                npz = Path(tmp, f"{name}-{length}.npz")
                if name in stopped:
                    row = {"press": name, "len": length, "skipped": f"not run: stopped at {stopped[name]:,}"}
                else:
                    row = measure(args, name, length, npz)
                if "skipped" in row:
                    stopped.setdefault(name, length)
                theirs = Path(tmp, f"kvpress-{length}.npz")
                if name == "lens" and npz.is_file() and theirs.is_file():
                    compare(row, theirs, npz)
                    row["time_over_kvpress"] = row["median_s"] / rows[-1]["median_s"]
                plain = next((r for r in rows if r["press"] == "plain" and r["len"] == length), None)
                if name != "plain" and "median_s" in row and plain is not None and "median_s" in plain:
                    row["time_over_plain"] = row["median_s"] / plain["median_s"]
                rows.append(row)
                print(_line(row), flush=True)
                record = make_record(
                    "kvpress_cpu",
                    model=args.model,
                    corpus=CORPUS,
                    compression_ratio=args.ratio,
                    repeats=args.repeats,
                    warmup_tokens=WARMUP,
                    rows=rows,
                    summary=summary(rows),
                )
                write_json(args.out, record)  # after every row: a run cut short keeps what it measured
    print("\n" + table(rows, COLUMNS))
    print(f"wrote {args.out}")
    return 0


def _line(r: dict) -> str:
    if "skipped" in r:
        return f"  {r['press']:>7} len {r['len']}: skipped ({r['skipped'][:160]})"
    return f"  {r['press']:>7} len {r['len']}: {r['median_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB"


COLUMNS = [
    Column("len", "len"),
    Column("press", "press", align="<"),
    Column("attention", "attention", align="<"),
    Column("prefill s", "median_s", ".2f"),
    Column("x kvpress", lambda r: r.get("time_over_kvpress"), ".2f"),
    Column("peak RSS MB", "peak_rss_mb", ".0f"),
    Column("cache", "cache_len"),
    Column("kept agree", lambda r: r.get("kept_agree"), ".4f"),
    Column("max rel score diff", lambda r: r.get("max_rel_score_diff"), ".1e"),
]


if __name__ == "__main__":
    sys.exit(main())
