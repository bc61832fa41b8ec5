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
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from entropy_lens.results import atomic_write_text

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
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
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

    run(ids[:, : WARMUP_LEN + 1])  # warm-up: allocator, compilation
    paths.clear()  # the timed runs' paths only
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(ids)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "mode": mode,
        "len": length,
        "median_s": statistics.median(times),
        "times_s": times,
        "peak_rss_mb": peak,
        "rss_after_load_mb": rss_loaded,
        "activation_rss_mb": peak - rss_loaded,
        "threads": torch.get_num_threads(),
        **({"paths": sorted(paths)} if paths else {}),
        **ran,
    }


def eager_too_big(length: int) -> str | None:
    need = 30 * 9 * length * length * 4  # fp32 attention maps of all layers, kept by output_attentions
    avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > avail / 2:
        return f"attention maps alone need {need / 2**30:.1f} GiB of {avail / 2**30:.0f} GiB"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "scan_cpu.json"))
    ap.add_argument("--worker", nargs=2, metavar=("MODE", "LEN"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.repeats)))
        return

    import torch

    rows = []
    for length in args.lengths:
        for mode in args.modes:
            reason = eager_too_big(length) if mode == "eager" else None
            if reason:
                rows.append({"mode": mode, "len": length, "skipped": reason})
                continue
            cmd = [sys.executable, __file__, "--worker", mode, str(length), "--repeats", str(args.repeats)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode:
                rows.append({"mode": mode, "len": length, "skipped": f"failed: {proc.stderr.strip()[-300:]}"})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(_row(rows[-1]), flush=True)
    by = {(r["mode"], r["len"]): r for r in rows if "median_s" in r}
    print(
        f"\n{'len':>6} {'mode':>13} {'median s':>9} {'x plain':>8} {'x body':>7} {'peak RSS MB':>12} "
        f"{'x plain':>8} {'act. MB':>8}  path"
    )
    for r in rows:
        if "skipped" in r:
            print(f"{r['len']:>6} {r['mode']:>13}  skipped: {r['skipped']}")
            continue
        p, b = by.get(("plain", r["len"])), by.get(("body", r["len"]))
        tx = f"{r['median_s'] / p['median_s']:.2f}" if p else "-"
        bx = f"{r['median_s'] / b['median_s']:.2f}" if b else "-"
        mx = f"{r['peak_rss_mb'] / p['peak_rss_mb']:.2f}" if p else "-"
        path = "+".join(r.get("paths", [])) + (f" ({r['fold']})" if "fold" in r else "")
        print(
            f"{r['len']:>6} {r['mode']:>13} {r['median_s']:>9.2f} {tx:>8} {bx:>7} {r['peak_rss_mb']:>12.0f} "
            f"{mx:>8} {r['activation_rss_mb']:>8.0f}  {path}"
        )
    record = {
        "benchmark": "scan_cpu",
        "model": "smollm2 (SmolLM2-135M, 30 layers, 9 heads, 3 KV, d 64)",
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(record, indent=2))
    print(f"wrote {args.out}")


def _row(r: dict) -> str:
    if "skipped" in r:
        return f"  {r['mode']:>13} len {r['len']}: skipped ({r['skipped'][:120]})"
    return f"  {r['mode']:>13} len {r['len']}: {r['median_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB"


if __name__ == "__main__":
    main()
