"""GPU benchmark: a TinyLlama-1.1B-shaped NoPE model (random weights, bf16, batch 1) at 4K–128K tokens.

    python benchmarks/scan_gpu.py [--lengths 4096 8192 16384 32768 65536 131072] [--repeats 3]
                                  [--modes plain scan ...] [--out benchmarks/results/scan_gpu.json] [--append]

Modes per length (median wall time after one warm-up, peak GPU memory from max_memory_allocated):
  plain   decoder forward with sdpa (flash kernels) + chunked next-token loss, read to the host: what a
          loss-only scan costs
  scan    the same with EntropyRecorder: per-layer, per-head entropy, sdpa output + Triton entropy pass,
          and the batch added to the float64 running sums on the host exactly as `scan` does it
  scan_fused  the same with the fused Triton pass (output + entropy in one pass over K/V); the
          capture's default `fused="auto"` times these two per shape and keeps the faster
  eager   attn_implementation="eager" (materialises each layer's [heads, T, T] probabilities) with
          entropy taken from them layer by layer; skipped where it runs out of memory
  kernel  the entropy kernel alone on one layer's q, k vs the attention forward on the same q, k, v
          (flash-attn when installed, else sdpa), with effective TFLOP/s of the QKᵀ products, the
          fused output+entropy kernel vs the two separately, and attention received (every key
          statistic, `attention_received`, its own LSE pass included) against the entropy kernel
Targets (issue 4): scan ≤ 1.3× plain at 16K, peak memory ≤ 1.1× plain, 128K fits on 80 GB, and at 8K
the scan ≥ 20× faster than eager. Prints a table and writes JSON with the GPU name after every row, so a
run cut short keeps what it measured; `--append` merges into an existing file (a run split into several
calls, e.g. 4K–32K, then 64K and 128K). Needs CUDA; `--device cpu --tiny` with TRITON_INTERPRET=1 runs
every mode on a toy shape on the CPU (a smoke test of this script: its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, make_record, parser, read_record, table, timed, write_json

MODES = ("plain", "scan", "scan_fused", "eager", "kernel")


def tinyllama_config(**overrides):
    """LlamaConfig of TinyLlama-1.1B (22 layers, 32 query heads over 4 KV heads, head_dim 64, hidden
    2048, intermediate 5632, vocab 32000); `overrides` shrink it for smoke tests."""
    from transformers import LlamaConfig

    shape = {
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
        **overrides,
    }
    return LlamaConfig(
        **shape,
        head_dim=shape["hidden_size"] // shape["num_attention_heads"],
        nope=True,
        train_len=2048,
        tie_word_embeddings=False,
    )


def build_model(config, device: str, dtype):
    """Random-weight NoPE Llama on `device` in `dtype`, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    from entropy_lens.models import apply_nope

    torch.manual_seed(0)
    model = (
        AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").to(device).eval()
    )
    apply_nope(model)
    return model


def entropy_flops(heads: int, length: int, head_dim: int, causal: bool = True) -> float:
    """Multiply-adds ×2 of the QKᵀ products one layer's entropy pass needs (causal: half the square)."""
    pairs = length * (length + 1) / 2 if causal else length * length
    return 2.0 * heads * pairs * head_dim


TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 96,
    "vocab_size": 50,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def _timed(fn, repeats: int, device) -> tuple[float, list[float], float | None]:
    """(median s, every time, peak GiB allocated on the GPU or None on the CPU) after one warm-up."""
    import torch

    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fn()  # warm-up (and autotune), before the peak is reset
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    timing = timed(fn, repeats=repeats, warmup=0, sync=sync)
    return timing.median, timing.times, torch.cuda.max_memory_allocated() / 2**30 if cuda else None


def run_mode(model, mode: str, length: int, repeats: int) -> dict:
    import torch

    from entropy_lens.capture import EntropyRecorder, forward_hidden, next_token_nll
    from entropy_lens.runs.sums import ScanSums

    cfg = model.config
    ids = torch.randint(0, cfg.vocab_size, (1, length + 1), device=model.device)
    row = {"mode": mode, "len": length}
    paths = set()  # what computed the capturing layers: capture/paths.py's names
    try:
        with torch.no_grad():
            if mode in ("plain", "scan", "scan_fused"):
                fused = "on" if mode == "scan_fused" else "off"
                sums = (
                    None
                    if mode == "plain"
                    else ScanSums(cfg.num_hidden_layers, cfg.num_attention_heads, length)
                )

                def fn():
                    with (
                        contextlib.nullcontext()
                        if mode == "plain"
                        else EntropyRecorder(model, fused=fused) as rec
                    ):
                        hidden = forward_hidden(model, ids[:, :-1])
                    nll = next_token_nll(model, hidden, ids[:, 1:])
                    if rec is None:
                        return nll.cpu()
                    paths.update(rec.session.paths)
                    sums.add(
                        rec, nll
                    )  # as `scan` does with each batch: loss and entropies into its float64 sums

            elif mode == "eager":
                fn = _eager(model, ids)
            else:
                return _kernel_row(cfg, length, repeats, model.device)
            median, times, peak = _timed(fn, repeats, model.device)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {**row, "skipped": "out of GPU memory"}
    finally:
        model.set_attn_implementation("sdpa")
    return {
        **row,
        "median_s": median,
        "times_s": times,
        "peak_gib": peak,
        **({"paths": sorted(paths)} if paths else {}),
    }


def _eager(model, ids):
    import torch

    from entropy_lens.capture import forward_hidden

    model.set_attn_implementation("eager")

    def fn():
        out = []

        def hook(_module, _args, output):  # (attn_output, attn_weights [B, H, T, T])
            out.append(torch.special.entr(output[1].float()).sum(-1))
            return (output[0], None)

        handles = [layer.self_attn.register_forward_hook(hook) for layer in model.model.layers]
        try:
            forward_hidden(model, ids[:, :-1])
        finally:
            for h in handles:
                h.remove()
        return out

    return fn


def _kernel_row(cfg, length: int, repeats: int, device) -> dict:
    import torch

    from entropy_lens.kernels import attention_entropy

    hq, hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q = torch.randn(1, hq, length, d, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, hkv, length, d, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    ent_s, _, ent_peak = _timed(
        lambda: attention_entropy(q, k, softmax_scale=d**-0.5, backend="triton"), repeats, device
    )
    try:
        from flash_attn import flash_attn_func

        name = "flash-attn"
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        attn_s, _, _ = _timed(lambda: flash_attn_func(qt, kt, vt, causal=True), repeats, device)
    except ImportError:
        name = "sdpa"
        attn_s, _, _ = _timed(
            lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True
            ),
            repeats,
            device,
        )
    from entropy_lens.kernels import attention_with_entropy

    fused_s, _, _ = _timed(
        lambda: attention_with_entropy(q, k, v, softmax_scale=d**-0.5, stats=("entropy",), backend="triton"),
        repeats,
        device,
    )
    from entropy_lens.kernels import attention_received

    # the column pass (issue 59) alone: it recomputes the row LSE (two passes over K), as a direct call does
    received_s, _, received_peak = _timed(
        lambda: attention_received(q, k, softmax_scale=d**-0.5, stats="all", backend="triton"),
        repeats,
        device,
    )
    tflops = entropy_flops(hq, length, d) / ent_s / 1e12
    return {
        "mode": "kernel",
        "len": length,
        "entropy_s": ent_s,
        "attention_s": attn_s,
        "attention": name,
        "fused_s": fused_s,
        "fused_vs_separate": fused_s / (attn_s + ent_s),
        "entropy_tflops": tflops,
        "entropy_peak_gib": ent_peak,
        "received_s": received_s,
        "received_vs_entropy": received_s / ent_s,
        "received_peak_gib": received_peak,
    }


def main() -> int:
    ap = parser(__doc__, "scan_gpu", repeats=3)
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536, 131072])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument(
        "--append", action="store_true", help="merge into --out's rows (same GPU) instead of replacing"
    )
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: smoke test (see the docstring)
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "scan_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False); run benchmarks/scan_cpu.py "
            "on CPU",
            file=sys.stderr,
        )
        return 1
    gpu = (
        torch.cuda.get_device_name() if args.device == "cuda" else "none: CPU smoke run, timings mean nothing"
    )
    out = Path(args.out)
    rows = _previous_rows(out, gpu) if args.append else []
    if rows is None:
        return 1
    model = build_model(tinyllama_config(**(TINY if args.tiny else {})), args.device, torch.bfloat16)
    about = "TinyLlama-1.1B shape, random weights, NoPE, bf16, batch 1" + (" (--tiny)" if args.tiny else "")
    for length in args.lengths:
        for mode in args.modes:
            row = run_mode(model, mode, length, args.repeats)
            rows = [r for r in rows if (r["mode"], r["len"]) != (mode, length)] + [row]
            print(json.dumps(row), flush=True)
            write_json(out, make_record("scan_gpu", gpu=gpu, model=about, rows=rows))  # a cut run keeps these
    rows = sorted(rows, key=lambda r: (r["len"], MODES.index(r["mode"])))
    print("\n" + table(rows, _columns(rows)))
    print(f"wrote {out}")
    return 0


def _previous_rows(out: Path, gpu: str) -> list[dict] | None:
    """The rows of an earlier run to merge with (--append); None (after a message) if they cannot be."""
    if not out.exists():
        return []
    old = read_record(out)
    if old.get("gpu") != gpu:
        print(
            f"{out} holds rows measured on {old.get('gpu')!r}, not {gpu!r}: drop --append or choose another "
            "--out",
            file=sys.stderr,
        )
        return None
    return old["rows"]


def _columns(rows: list[dict]) -> list[Column]:
    """The printed table's: each mode's time and peak against plain's at the same length; the kernel rows'
    entropy pass, with the attention forward and the fused pass in the notes."""
    plain = {r["len"]: r for r in rows if r["mode"] == "plain" and "median_s" in r}

    def kernel(r: dict) -> bool:
        return r["mode"] == "kernel"

    def over(key: str):
        def ratio(r: dict) -> float | None:
            p = plain.get(r["len"])
            return None if kernel(r) or not p or not p[key] or r[key] is None else r[key] / p[key]

        return ratio

    def notes(r: dict) -> str:
        if not kernel(r):
            return ""
        return (
            f"{r['attention']} {r['attention_s']:.3f} s; entropy {r['entropy_tflops']:.1f} TFLOP/s; "
            f"fused {r['fused_s']:.3f} s ({r['fused_vs_separate']:.2f}x separate); "
            f"received {r['received_s']:.3f} s ({r['received_vs_entropy']:.2f}x entropy)"
        )

    return [
        Column("len", "len"),
        Column("mode", "mode"),
        Column("median s", lambda r: r["entropy_s"] if kernel(r) else r["median_s"], ".3f"),
        Column("x plain", over("median_s"), ".2f"),
        Column("peak GiB", lambda r: r["entropy_peak_gib"] if kernel(r) else r["peak_gib"], ".2f"),
        Column("x plain", over("peak_gib"), ".2f"),
        Column("notes", notes, align="<"),
    ]


if __name__ == "__main__":
    sys.exit(main())
