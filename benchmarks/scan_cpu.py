"""CPU benchmark: plain sdpa forward vs entropy-lens scan (its attention paths) vs eager materialisation
(SmolLM2-135M, float32).

    python benchmarks/scan_cpu.py [--lengths 1024 2048 4096 8192 16384] [--repeats 1]
                                  [--modes plain body scan ...] [--out benchmarks/results/scan_cpu.json]

Each (mode, length) runs in a fresh subprocess so its peak RSS (ru_maxrss) is its own. Modes:
  plain          model(ids): the usual HF forward with sdpa, logits for every position
  body           the decoder alone (no logits): what the scan's forward costs without capture
  body+loss      a scan's batch without its capture (`runs.scan.scan_batch`): the decoder, the free
                 heap returned after each layer and before the chunked loss (runs/memory.py), the loss
  scan           what `entropy-lens scan` does per sample: `scan_batch` inside an EntropyRecorder
                 (--fused auto, which times separate against fused on the first layers of the timed
                 run itself)
  scan-native    --fused on: output and entropy from the native C++ kernel, one pass per layer
                 (kernels/native; built before the timed runs)
  scan-stats     scan-native with --stats all: every row statistic of kernels/stats.py that applies
  scan-fused     --fused on with ENTROPY_LENS_NATIVE=0: output and entropy from one streamed torch pass
  scan-separate  --fused off: sdpa's output, then the entropy pass
  scan-compiled  scan-fused with ENTROPY_LENS_COMPILE=1: the per-tile step compiled (kernels/fold.py)
  eager          attn_implementation="eager" with output_attentions=True, entropy from the returned
                 probabilities: the materialising method of the paper's own code (skipped where the
                 attention maps alone would exceed half of the machine's memory)
Reported: median wall time of `repeats` runs in one process after one warm-up on a 256-token input
(compilation happens there; "auto" measures on the real length, inside the first timed run, and keeps
its choice for the later ones, so with repeats the median is a long scan's per-sample cost and
`times_s[0]` holds the trial), peak RSS of the process over all runs,
the RSS increase over the loaded model (the activations' share), the threads torch used, and for
scans the attention path and per-tile step that ran. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, parser, peak_rss_mb, physical_memory_bytes, run_json, table, timed, write_record

MODES = (
    "plain",
    "body",
    "body+loss",
    "scan",
    "scan-native",
    "scan-stats",
    "scan-fused",
    "scan-separate",
    "scan-compiled",
    "eager",
)
FUSED = {
    "scan": "auto",
    "scan-native": "on",
    "scan-stats": "on",
    "scan-fused": "on",
    "scan-separate": "off",
    "scan-compiled": "on",
}
WARMUP_LEN = 256


def worker(mode: str, length: int, repeats: int) -> dict:
    if mode == "scan-compiled":
        os.environ["ENTROPY_LENS_COMPILE"] = "1"
    if mode in ("scan-fused", "scan-compiled"):  # the streamed torch pass, not the native kernel
        os.environ["ENTROPY_LENS_NATIVE"] = "0"
    import torch

    from entropy_lens.capture import EntropyRecorder, forward_hidden
    from entropy_lens.data import token_chunks
    from entropy_lens.kernels import ROW_STATS, fold_status, native_status
    from entropy_lens.models import load_model
    from entropy_lens.runs.scan import scan_batch

    lm = load_model("smollm2")
    model = lm.model
    ids = torch.from_numpy(token_chunks(lm.tokenizer, "austen", length=length, samples=1, seed=0).ids)
    if mode == "eager":
        model.set_attn_implementation("eager")
    rss_loaded = peak_rss_mb()
    ran, paths = {}, set()

    def run(ids):
        with torch.no_grad():
            if mode == "plain":
                return model(ids[:, :-1]).logits.shape
            if mode == "body":
                return forward_hidden(model, ids[:, :-1]).shape
            if mode == "body+loss":
                return scan_batch(model, ids).shape
            if mode in FUSED:
                stats = (
                    {"stats": tuple(ROW_STATS)} if mode == "scan-stats" else {}
                )  # --stats all; else the default
                rec = EntropyRecorder(model, fused=FUSED[mode], **stats)
                scan_batch(model, ids, rec)
                paths.update(rec.session.paths)  # over all runs: auto's trial is in the first only
                ran.update(fold=fold_status(), native=native_status(), stats=list(rec.stats))
                return rec.entropy.shape
            att = model(ids[:, :-1], output_attentions=True).attentions
            return torch.stack([torch.special.entr(a.float()).sum(-1) for a in att]).shape

    run(ids[:, : WARMUP_LEN + 1])  # warm-up on a short input: allocator, compilation
    paths.clear()  # the timed runs' paths only
    timing = timed(lambda: run(ids), repeats=repeats, warmup=0)
    peak = peak_rss_mb()
    return {
        "mode": mode,
        "len": length,
        "median_s": timing.median,
        "times_s": timing.times,
        "peak_rss_mb": peak,
        "rss_after_load_mb": rss_loaded,
        "activation_rss_mb": peak - rss_loaded,
        "threads": torch.get_num_threads(),
        **({"paths": sorted(paths)} if paths else {}),
        **ran,
    }


def eager_too_big(length: int) -> str | None:
    need = 30 * 9 * length * length * 4  # fp32 attention maps of all layers, kept by output_attentions
    avail = physical_memory_bytes()
    if need > avail / 2:
        return f"attention maps alone need {need / 2**30:.1f} GiB of {avail / 2**30:.0f} GiB"
    return None


def main() -> None:
    ap = parser(__doc__, "scan_cpu", repeats=1)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--worker", nargs=2, metavar=("MODE", "LEN"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.repeats)))
        return

    rows = []
    for length in args.lengths:
        for mode in args.modes:
            reason = eager_too_big(length) if mode == "eager" else None
            if reason:
                rows.append({"mode": mode, "len": length, "skipped": reason})
                continue
            cmd = [sys.executable, __file__, "--worker", mode, str(length), "--repeats", str(args.repeats)]
            try:
                rows.append(run_json(cmd))
            except RuntimeError as err:
                rows.append({"mode": mode, "len": length, "skipped": str(err)})
            print(_row(rows[-1]), flush=True)
    print("\n" + table(rows, _columns(rows)))
    model = "smollm2 (SmolLM2-135M, 30 layers, 9 heads, 3 KV, d 64)"
    write_record(args.out, "scan_cpu", model=model, rows=rows)


def _columns(rows: list[dict]) -> list[Column]:
    """The printed table's: times and peaks, and their ratios to plain's and body's at the same length."""
    by = {(r["mode"], r["len"]): r for r in rows if "median_s" in r}

    def over(mode: str, key: str):
        def ratio(r: dict) -> float | None:
            base = by.get((mode, r["len"]))
            return r[key] / base[key] if base else None

        return ratio

    def path(r: dict) -> str:
        return "+".join(r.get("paths", [])) + (f" ({r['fold']})" if "fold" in r else "")

    return [
        Column("len", "len"),
        Column("mode", "mode"),
        Column("median s", "median_s", ".2f"),
        Column("x plain", over("plain", "median_s"), ".2f"),
        Column("x body", over("body", "median_s"), ".2f"),
        Column("peak RSS MB", "peak_rss_mb", ".0f"),
        Column("x plain", over("plain", "peak_rss_mb"), ".2f"),
        Column("act. MB", "activation_rss_mb", ".0f"),
        Column("path", path, align="<"),
    ]


def _row(r: dict) -> str:
    if "skipped" in r:
        return f"  {r['mode']:>13} len {r['len']}: skipped ({r['skipped'][:120]})"
    return f"  {r['mode']:>13} len {r['len']}: {r['median_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB"


if __name__ == "__main__":
    main()
