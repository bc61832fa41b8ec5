"""What peers do against a scan: eager attention with its probabilities materialised, on CPU (SmolLM2-135M).

    python benchmarks/peers_cpu.py [--model smollm2] [--lengths 2048 4096 8192] [--repeats 1]
                                   [--out benchmarks/results/peers_cpu.json]
    python benchmarks/peers_cpu.py --quick --out /tmp/peers.json   # tiny-nope at 64 tokens: a smoke test

Tools that hand a user the attention pattern (TransformerLens' bridge, nnsight) run a model's eager
attention, which builds every layer's (heads, T, T) probabilities; the entropy is then computed from
them. Three modes, each (mode, length) in a fresh process so its peak RSS (ru_maxrss) is its own:
  scan               what `entropy-lens scan` does per sample: `runs.scan.scan_batch` inside an
                     EntropyRecorder with its defaults (the default CPU route; its paths are recorded)
  hooks              attn_implementation="eager", a forward hook on every layer's attention module reading
                     the probabilities it returns, the entropy taken there (one layer's maps alive at a time)
  output_attentions  attn_implementation="eager", model(ids, output_attentions=True): every layer's maps
                     returned together, the entropy taken from them (skipped where the maps alone would
                     exceed half of the machine's memory)
Both peers run the usual forward with logits (`model(ids)`); the scan runs the decoder and its chunked
loss. Entropy in nats from the probabilities: −Σ p ln p (torch.special.entr), in float32.
Reported per row: median wall time of `repeats` runs after one warm-up on a short input, the process's
peak RSS and its RSS after loading the model, the threads torch used, and the largest absolute
difference of the row's entropy (layer, head, position) from the scan's. `summary` compares hooks with
the scan at the longest length both ran. Prints a table and writes JSON; the benchmarks page's table
and the README's line are made from it (benchmarks/readme_tables.py).

Duration at the defaults (estimated from scan_cpu's timings, not measured): about 5 to 10 minutes on 2
quiet cores, with `--repeats 1`. output_attentions at 8K holds 67.5 GiB of maps: skipped on machines
with less than twice that; at 4K (16.9 GiB of maps) it needs 34 GiB.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, parser, peak_rss_mb, physical_memory_bytes, run_json, table, timed, write_record

MODES = ("scan", "hooks", "output_attentions")
LENGTHS = (2048, 4096, 8192)
QUICK = {"model": "tiny-nope", "lengths": [64], "repeats": 1}
WARMUP_LEN = 32


def worker(model_name: str, mode: str, length: int, repeats: int, entropy_out: str) -> dict:
    """Inside each measured process: load, warm up, time `repeats` runs, save the last run's entropy
    (layers, heads, positions) float32 to `entropy_out` (.npy) and return the row."""
    import numpy as np
    import torch

    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model
    from entropy_lens.runs.scan import scan_batch

    lm = load_model(model_name)
    model = lm.model
    ids = torch.from_numpy(token_chunks(lm.tokenizer, "austen", length=length, samples=1, seed=0).ids)
    if mode != "scan":
        model.set_attn_implementation("eager")
    rss_loaded = peak_rss_mb()
    paths: set[str] = set()

    def entropy_of(probs: torch.Tensor) -> torch.Tensor:  # (1, H, T, T) -> (H, T)
        return torch.special.entr(probs[0].float()).sum(-1)

    def run(ids: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            if mode == "scan":
                rec = EntropyRecorder(model)
                scan_batch(model, ids, rec)
                paths.update(rec.session.paths)
                return rec.entropy.astype(np.float32)
            if mode == "output_attentions":
                maps = model(ids[:, :-1], output_attentions=True).attentions
                return torch.stack([entropy_of(a) for a in maps]).numpy()
            per_layer = []

            def hook(module, args, output):
                per_layer.append(entropy_of(output[1]))

            handles = [layer.self_attn.register_forward_hook(hook) for layer in model.model.layers]
            try:
                model(ids[:, :-1])
            finally:
                for handle in handles:
                    handle.remove()
            return torch.stack(per_layer).numpy()

    run(ids[:, : WARMUP_LEN + 1])  # warm-up on a short input: the allocator, a native kernel's build
    paths.clear()  # the timed runs' paths only
    entropy = []
    timing = timed(lambda: entropy.append(run(ids)), repeats=repeats, warmup=0)
    np.save(entropy_out, entropy[-1])
    return {
        "mode": mode,
        "len": length,
        "median_s": timing.median,
        "times_s": timing.times,
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_load_mb": rss_loaded,
        "threads": torch.get_num_threads(),
        **({"paths": sorted(paths)} if paths else {}),
    }


@functools.cache
def _layers_heads(model_name: str) -> tuple[int, int]:
    from entropy_lens.models import load_model

    config = load_model(model_name).model.config
    return config.num_hidden_layers, config.num_attention_heads


def maps_too_big(model_name: str, length: int) -> str | None:
    """Why output_attentions cannot run at `length` here (every layer's fp32 maps at once), or None."""
    layers, heads = _layers_heads(model_name)
    need = layers * heads * length * length * 4
    avail = physical_memory_bytes()
    if need > avail / 2:
        return f"the attention maps alone need {need / 2**30:.1f} GiB of {avail / 2**30:.0f} GiB"
    return None


def summary(rows: list[dict]) -> dict | None:
    """hooks against the scan at the longest length both ran: time and peak-RSS ratios (None if none)."""
    by = {(r["mode"], r["len"]): r for r in rows if "median_s" in r}
    both = [n for (mode, n) in by if mode == "hooks" and ("scan", n) in by]
    if not both:
        return None
    n = max(both)
    hooks, scan = by[("hooks", n)], by[("scan", n)]
    return {
        "len": n,
        "speedup": hooks["median_s"] / scan["median_s"],
        "memory_ratio": hooks["peak_rss_mb"] / scan["peak_rss_mb"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "peers_cpu", repeats=1)
    ap.add_argument("--model", default="smollm2", help="a model `scan` loads (default: the bundled SmolLM2)")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--quick", action="store_true", help="tiny-nope at 64 tokens, once: a smoke test")
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "LEN", "NPY"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    if args.worker:
        mode, length, npy = args.worker
        print(json.dumps(worker(args.model, mode, int(length), args.repeats, npy)))
        return 0

    import numpy as np

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for length in args.lengths:
            scan_npy = Path(tmp, f"scan-{length}.npy")
            for mode in MODES:
                reason = maps_too_big(args.model, length) if mode == "output_attentions" else None
                if reason:
                    rows.append({"mode": mode, "len": length, "skipped": reason})
                    continue
                npy = Path(tmp, f"{mode}-{length}.npy")
                cmd = [sys.executable, __file__, "--model", args.model, "--repeats", str(args.repeats)]
                try:
                    row = run_json([*cmd, "--worker", mode, str(length), str(npy)])
                except RuntimeError as err:
                    rows.append({"mode": mode, "len": length, "skipped": str(err)})
                    continue
                if mode != "scan" and scan_npy.is_file():  # the scan ran first (no file: it failed)
                    diff = np.abs(np.load(npy).astype(np.float64) - np.load(scan_npy))
                    row["max_abs_entropy_diff"] = float(np.nanmax(diff))
                rows.append(row)
                print(
                    f"  {mode:>17} len {length}: {row['median_s']:.2f} s, {row['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
    print("\n" + table(rows, COLUMNS))
    write_record(args.out, "peers_cpu", model=args.model, rows=rows, summary=summary(rows))
    return 0


COLUMNS = [
    Column("len", "len"),
    Column("mode", "mode", align="<"),
    Column("median s", "median_s", ".2f"),
    Column("peak RSS MB", "peak_rss_mb", ".0f"),
    Column("max |ΔH| nats", lambda r: r.get("max_abs_entropy_diff"), ".1e"),
]


if __name__ == "__main__":
    sys.exit(main())
