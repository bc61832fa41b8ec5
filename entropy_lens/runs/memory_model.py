"""How much memory a scan rank needs: a model of the peak, in bytes, by term (docs/scaling.md).

    shape = SHAPES["Llama-3-8B"]                               # or ModelShape(...) of any decoder
    rank_bytes(shape, tokens=2**20, ranks=4, dtype_bytes=2)    # {"weights": ..., "peak": ...}
    smallest_ranks(shape, tokens=2**20, device_bytes=80e9)     # the fewest --context-parallel ranks

With T tokens over P ranks (t = ⌈T/P⌉ + 1 local positions: a rank holds two chunks of ⌊T/2P⌋ or one
more), b bytes per element of the model's dtype, L layers, Hq query and Hkv key/value heads of D,
hidden size h, intermediate size I, vocabulary V:

    weights    params · b                                  every rank holds the whole model
    residual   4 · t · h · b                               the residual stream and the normed states (2), and
                                                           2 more fitted to the measured growth, not traced
                                                           to tensors (benchmarks/context_parallel_cpu.py)
    attention  t · D · (3·Hq + 3·Hkv) · b                  q, k, v, q and k after RoPE, the output
    gathered   3 · T · Hkv · D · b   (P > 1)               K of the whole sequence, V's pieces and V
    sdpa       5 · MASK_BUDGET [+ 2 · T · Hq · D · b]      only where sdpa makes a sharded layer's output
               (P > 1: --fused off, or auto's trial)        (`bottom_right_sdpa`: a block of the mask, bool
                                                           and float; off CPU, a GQA layer's K and V
                                                           repeated per query head as transformers does)
    mlp        3 · t · I · b                               gate, up and their product
    loss       LOGITS_BUDGET                               one chunk of float32 logits (capture/loss.py)

    activations = residual + max(attention + gathered [+ sdpa], mlp, loss)
    peak        = weights + activations

The statistics of a layer ((B, Hq, t) float32 each) and the kernels' tiles are small beside these and
left out. The host holds the float64 sums, on every rank for the whole length (the all-reduce adds
whole arrays): host_sums = 2 · L · Hq · T · 8 per summed statistic (entropy and its square by
default), which on a CPU scan is resident memory like the rest. The terms that do not shrink with P
are the weights, `gathered` (K and V of the whole sequence, per layer, freed after it) and the loss
chunk: past some P more ranks stop helping, and a sequence whose K and V do not fit one device needs
the key-shard merge (kernels/merge.py) instead of the all-gather.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from entropy_lens.capture.context_parallel import MASK_BUDGET
from entropy_lens.capture.loss import LOGITS_BUDGET

__all__ = ["SHAPES", "ModelShape", "rank_bytes", "ranks_table", "smallest_ranks"]


@dataclass(frozen=True)
class ModelShape:
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    params: int


SHAPES = {
    "SmolLM2-135M": ModelShape(30, 9, 3, 64, 576, 1536, 49152, 134_515_008),
    "TinyLlama-1.1B": ModelShape(22, 32, 4, 64, 2048, 5632, 32000, 1_100_048_384),
    "Llama-3-8B": ModelShape(32, 32, 8, 128, 4096, 14336, 128256, 8_030_261_248),
}


def rank_bytes(
    shape: ModelShape,
    tokens: int,
    ranks: int,
    *,
    dtype_bytes: int = 2,
    sdpa_output: bool = False,
    device: str = "cuda",
) -> dict[str, int]:
    """The module docstring's terms, `activations` (what a scan's batches add to what the process holds
    before them), `peak` (device, or CPU beside the process's fixed memory) and `host_sums` (the host's
    float64 sums of entropy and its square), in bytes, for one rank of `ranks` scanning `tokens` positions
    (batch 1); `sdpa_output`: sdpa makes the sharded layers' outputs, on `device` ("cpu" or "cuda")."""
    s, b = shape, dtype_bytes
    t = math.ceil(tokens / ranks) + (1 if ranks > 1 else 0)
    sharded = ranks > 1
    repeated = device != "cpu" and s.heads > s.kv_heads  # off CPU, sdpa with a mask gets K, V per query head
    terms = {
        "weights": s.params * b,
        "residual": 4 * t * s.hidden * b,
        "attention": t * s.head_dim * (3 * s.heads + 3 * s.kv_heads) * b,
        "gathered": 3 * tokens * s.kv_heads * s.head_dim * b if sharded else 0,
        "sdpa": 5 * MASK_BUDGET + (2 * tokens * s.heads * s.head_dim * b if repeated else 0)
        if sharded and sdpa_output
        else 0,
        "mlp": 3 * t * s.intermediate * b,
        "loss": LOGITS_BUDGET,
    }
    attention = terms["attention"] + terms["gathered"] + terms["sdpa"]
    terms["activations"] = terms["residual"] + max(attention, terms["mlp"], terms["loss"])
    terms["peak"] = terms["weights"] + terms["activations"]
    terms["host_sums"] = 2 * s.layers * s.heads * tokens * 8
    return terms


def smallest_ranks(
    shape: ModelShape, tokens: int, *, device_bytes: float, usable: float = 0.9, dtype_bytes: int = 2
) -> int | None:
    """The fewest ranks whose modelled peak fits `usable` of a device of `device_bytes` (the rest: the
    CUDA context and the allocator's slack), or None where no number of ranks does (the terms that do
    not shrink with P exceed the device)."""
    budget = usable * device_bytes
    for ranks in range(1, max(2, tokens // 2) + 1):
        need = rank_bytes(shape, tokens, ranks, dtype_bytes=dtype_bytes)
        if need["peak"] <= budget:
            return ranks
        floor = need["weights"] + need["gathered"] + need["loss"]
        if ranks > 1 and floor > budget:
            return None
    return None


def ranks_table(
    names=("TinyLlama-1.1B", "Llama-3-8B"), lengths=(2**17, 2**20, 2**22), *, device_gb: int = 80
) -> str:
    """The Markdown table of docs/scaling.md: the smallest P per shape and length on `device_gb` GB
    devices (bfloat16), with the modelled peak per rank and the host's float64 sums per rank."""
    rows = [
        f"| shape | T | smallest P ({device_gb} GB, bf16) | modelled peak per rank GB | host sums per rank GB |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        for tokens in lengths:
            ranks = smallest_ranks(SHAPES[name], tokens, device_bytes=device_gb * 1e9)
            if ranks is None:
                rows.append(f"| {name} | {tokens:,} | none: K, V and the weights exceed a device | | |")
                continue
            terms = rank_bytes(SHAPES[name], tokens, ranks)
            rows.append(
                f"| {name} | {tokens:,} | {ranks} | {terms['peak'] / 1e9:.1f} | {terms['host_sums'] / 1e9:.1f} |"
            )
    return "\n".join(rows)
