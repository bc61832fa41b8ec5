"""The kernel cases, shared: the inputs, masks, extras and float64 definitions every backend is held to,
and the backends that can run them here (pytest puts tests/ on sys.path, so test modules import it as
`kernel_cases`).

    RUNNABLE   the kernels the shared grids are parametrised over, as pytest params: "torch_chunked"
               everywhere; "native" where its build loads (else a skip naming `native_status()`);
               "triton" on CUDA or under TRITON_INTERPRET=1 only (elsewhere not collected at all:
               tests/kernels/test_triton_interp.py runs the grids' triton cases under the interpreter in a
               child process, `-k triton`, and skips saying why where triton is not installed)
    TRITON_RUNS  whether the Triton kernel runs in this process (`triton_skip_reason()` says why not)
    TILES      the tiles (block_q, block_k) each kernel runs the small grids with, unless a test names its
               own (`cpu_tiles`): one holding every key, and odd ones (T not a multiple of block_q,
               several key blocks per row); None for the Triton kernel, which picks its blocks
    entropy_pass, one_pass   `attention_entropy` / `attention_with_entropy` on a backend's device, the
               results back on the CPU
    ENTRY_POINTS  every public entry point that takes the score modifiers, by name

The builders (`make_inputs`, `mask_kinds`, `make_values`, `make_sinks`, `make_slopes`, `hf_mask`) and the
float64 definitions (`output_reference`, `reference_output`, `definition`) and plain PyTorch's
low-precision computations (`plain_pytorch_entropy`, `plain_pytorch_extras`) are the ones the kernels
were always tested with; the tests that use them live in test_kernels.py (the fp32 grid, windows, low
precision), test_kernels_extras.py (softcap, sinks), test_kernels_alibi.py (ALiBi, key bias).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from entropy_lens.kernels import (
    ScoreMods,
    attention_entropy,
    attention_received,
    attention_with_entropy,
    merge_states,
    native_available,
    native_status,
    shard_state,
    sink_state,
    statistics_kernel,
)
from entropy_lens.kernels.reference import causal_visible

# ---- the backends that can run here --------------------------------------------------------------------

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def triton_skip_reason() -> str | None:
    """Why the Triton kernel cannot run in this process (None where it can)."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    if INTERPRET or torch.cuda.is_available():
        return None
    return (
        "the Triton kernel runs on CUDA, or under TRITON_INTERPRET=1: tests/kernels/test_triton_interp.py runs "
        "these cases so, in a child process"
    )


TRITON_RUNS = triton_skip_reason() is None

# the Triton cases are collected only where they run: elsewhere a skip per case would be hundreds of
# items that only say test_triton_interp.py runs them (a missing native build still skips, saying why)
RUNNABLE = [
    pytest.param("torch_chunked", id="torch_chunked"),
    pytest.param(
        "native",
        id="native",
        marks=pytest.mark.skipif(not native_available(), reason=f"native kernel {native_status()}"),
    ),
    *([pytest.param("triton", id="triton")] if TRITON_RUNS else []),
]

TILES = {
    "torch_chunked": [(64, 1024), (7, 5)],
    "native": [(64, 512), (32, 32), (7, 5)],
    "triton": [(None, None)],
}


def cpu_tiles(tiles) -> dict:
    """The same `tiles` for both CPU kernels (None for the Triton kernel: it picks its blocks)."""
    return {"torch_chunked": tiles, "native": tiles, "triton": TILES["triton"]}


def device(backend: str) -> str:
    """Where `backend` runs: the Triton kernel on CUDA (on the CPU under the interpreter), the rest on CPU."""
    return "cuda" if backend == "triton" and not INTERPRET else "cpu"


def on_device(kw: dict, dev: str) -> dict:
    """`kw` with every tensor moved to `dev`."""
    return {key: val.to(dev) if isinstance(val, torch.Tensor) else val for key, val in kw.items()}


def _blocks(tile) -> dict:
    bq, bk = tile
    return {} if bq is None else {"block_q": bq, "block_k": bk}


def entropy_pass(backend: str, q, k, tile=(None, None), **kw):
    """(entropy, sink mass), each (B, Hq, T) on the CPU, of `attention_entropy(backend=backend)` with the
    tile `tile` and the keywords `kw` (softmax_scale, the score modifiers), run on the backend's device."""
    dev = device(backend)
    h, p = attention_entropy(
        q.to(dev), k.to(dev), backend=backend, return_sink_mass=True, **_blocks(tile), **on_device(kw, dev)
    )
    return h.cpu(), p.cpu()


def one_pass(backend: str, q, k, v, tile=(None, None), **kw):
    """(output (B, T, Hq, Dv), entropy, sink mass) on the CPU of `attention_with_entropy(backend=backend)`."""
    dev = device(backend)
    rows = attention_with_entropy(
        q.to(dev), k.to(dev), v.to(dev), backend=backend, **_blocks(tile), **on_device(kw, dev)
    )
    return rows.out.cpu(), rows["entropy"].cpu(), rows["sink_mass"].cpu()


def value_dim(backend: str, dim: int = 12) -> int:
    """The values' head size in the one-pass cases: `dim` (not q's 16, so no kernel can confuse the two),
    but q's 16 for the Triton kernel, whose one pass makes an output of q's head size (for other values
    `attention_with_entropy` and the plan run torch_chunked, so the case would not test the kernel)."""
    return 16 if backend == "triton" else dim


# ---- inputs ------------------------------------------------------------------------------------------


def make_inputs(B, Hq, Hkv, T, S, D=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, Hq, T, D, generator=g) * 1.5).to(dtype)
    k = (torch.randn(B, Hkv, S, D, generator=g) * 1.5).to(dtype)
    return q, k


def mask_kinds(B, Hq, T, S, seed=1):
    g = torch.Generator().manual_seed(seed)
    pad = torch.ones(B, S, dtype=torch.bool)
    pad[0, : S // 3] = False  # left padding on the first sequence
    return {
        "none": None,
        "key_padding": pad,
        "4d_per_head": torch.rand(B, Hq, T, S, generator=g) > 0.4,
    }


def make_values(B, Hkv, S, Dv=12, dtype=torch.float32, seed=3):
    return torch.randn(B, Hkv, S, Dv, generator=torch.Generator().manual_seed(seed)).to(dtype)


# which extras ride along: (softcap, sinks?)
EXTRAS = {"softcap": (2.5, False), "sinks": (None, True), "both": (2.5, True)}
ALIBI_EXTRAS = {"alibi": (None, False), "softcap": (2.5, False), "sinks": (None, True), "all": (2.5, True)}


def make_sinks(Hq, seed=2):
    """Sink logits of the size scores have here, so the sink takes a visible share of each row."""
    return torch.randn(Hq, generator=torch.Generator().manual_seed(seed)) * 2.0 + 1.0


def make_slopes(Hq, factor=1.0):
    """The models' geometric slopes 2^(−8(h+1)/Hq) (BLOOM's for a power-of-two Hq), times `factor`."""
    return factor * 2.0 ** (-8.0 * torch.arange(1, Hq + 1, dtype=torch.float32) / Hq)


def hf_mask(keep, T, S, window=None):
    """The (B, 1, T, S) bool mask transformers itself builds for T queries at the end of S keys:
    causal, sliding window, key padding `keep` (B, S). Built by transformers, not by the kernels'
    helpers, so the kernels' window convention is checked against the library's."""
    from transformers.masking_utils import (
        causal_mask_function,
        sdpa_mask,
        sliding_window_causal_mask_function,
    )

    shape = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    return sdpa_mask(
        keep.shape[0],
        T,
        S,
        q_offset=S - T,
        mask_function=shape,
        attention_mask=keep,
        allow_is_causal_skip=False,
    )


# ---- float64 definitions -----------------------------------------------------------------------------


def output_reference(q, k, v, scale, causal, mask):
    """softmax(λ_h q·k + mask) v in float64, (B, T, Hq, Dv); 0 for a row that sees no key."""
    G = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(G, 1) for x in (k, v))
    s = scale.double().view(1, -1, 1, 1) * (q.double() @ k.transpose(-1, -2))
    T, S = s.shape[-2:]
    keep = torch.ones(T, S, dtype=torch.bool)
    if causal:
        keep = keep.tril(S - T)
    if mask is not None:
        keep = keep & (mask[:, None, None, :] if mask.ndim == 2 else mask)
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)
    return (p @ v).transpose(1, 2)


def reference_output(q, k, v, softmax_scale, causal=True, mask=None, window=None, softcap=None, sinks=None):
    """float64 Σ_j p_j v_j (B, T, Hq, Dv), materialised from the definitions: key heads repeated for
    GQA, the sink as one more column with no value, 0 for a row with no key and no sink."""
    B, Hq, T, _ = q.shape
    S = k.shape[2]
    G = Hq // k.shape[1]
    kk, vv = (x.double().repeat_interleave(G, dim=1) for x in (k, v))
    lam = torch.as_tensor(softmax_scale, dtype=torch.float64).reshape(-1, 1, 1).expand(Hq, 1, 1)
    s = torch.matmul(q.double(), kk.transpose(-1, -2)) * lam
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    visible = causal_visible(T, S, window=window) if causal else torch.ones(T, S, dtype=torch.bool)
    if mask is not None:
        visible = visible & (mask[:, None, None, :] if mask.ndim == 2 else mask)
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(1, Hq, 1, 1).expand(B, Hq, T, 1)], dim=-1)
        vv = torch.cat([vv, torch.zeros_like(vv[:, :, :1])], dim=2)  # the sink has no value
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.matmul(p, vv).transpose(1, 2)


def definition(
    q,
    k,
    v,
    softmax_scale,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
):
    """float64 (entropy (B, Hq, T), sink mass (B, Hq, T), output (B, T, Hq, Dv) or None for v None),
    materialised from the definition: key heads repeated for GQA, scores λ_h q·k, capped, minus
    slope_h·|position_i − j| with position_i = i + S − T, masked, the sink as one more unbiased column with
    no value; a row with no key and no sink has p = 0 (H = 0, output 0)."""
    B, Hq, T, _ = q.shape
    S = k.shape[2]
    G = Hq // k.shape[1]
    kk = k.double().repeat_interleave(G, dim=1)
    scale = torch.as_tensor(softmax_scale, dtype=torch.float64).reshape(-1).expand(Hq).view(1, Hq, 1, 1)
    s = torch.matmul(q.double(), kk.transpose(-1, -2)) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    position = torch.arange(T, dtype=torch.float64) + (S - T)  # of query i among the keys
    behind = position[:, None] - torch.arange(S, dtype=torch.float64)[None, :]
    if alibi_slopes is not None:
        s = s - alibi_slopes.double().view(1, Hq, 1, 1) * behind.abs()
    if key_bias is not None:  # (B|1, Hq, S): the same for every row
        s = s + key_bias.double()[:, :, None, :]
    visible = torch.ones(T, S, dtype=torch.bool)
    if causal:
        visible = behind >= 0
        if window is not None:
            visible = visible & (behind < window)
    if mask is not None:
        visible = visible & (mask[:, None, None, :] if mask.ndim == 2 else mask)
    s = s.masked_fill(~visible.expand(B, Hq, T, S), float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(1, Hq, 1, 1).expand(B, Hq, T, 1)], dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    h = -torch.special.xlogy(p, p).sum(-1)
    sink_mass = p[..., S] if sinks is not None else torch.zeros_like(h)
    if v is None:
        return h, sink_mass, None
    vv = v.double().repeat_interleave(G, dim=1)
    return h, sink_mass, torch.matmul(p[..., :S], vv).transpose(1, 2)


# ---- plain PyTorch in low precision (the error the kernels may make: at most twice this) ------------


def plain_pytorch_entropy(q, k, scale, T, S):
    """What an eager HF model does in a low-precision dtype: scores in that dtype, softmax in
    fp32 cast back, entropy from those probabilities (the paper's own computation)."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    vis = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.special.entr(p).sum(-1).float()


def plain_pytorch_extras(q, k, v, scale, softcap, sinks):
    """What an eager model does in q's dtype (Gemma2's / gpt-oss's eager): scores, cap and sink in that
    dtype, softmax in fp32 cast back; the entropy of those probabilities and the output."""
    G = q.shape[1] // k.shape[1]
    T, S = q.shape[2], k.shape[2]
    s = torch.matmul(q, k.repeat_interleave(G, 1).transpose(-1, -2)) * scale
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    s = s.masked_fill(~causal_visible(T, S), float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.to(q.dtype).view(1, -1, 1, 1).expand(*s.shape[:3], 1)], -1)
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(p[..., :S], v.repeat_interleave(G, 1)).transpose(1, 2)
    return torch.special.entr(p.float()).sum(-1), out


# ---- the public entry points ---------------------------------------------------------------------------


def _needs(backend: str) -> str | None:
    """Why a call on `backend` cannot run here (None where it can)."""
    if backend == "native" and not native_available():
        return f"native kernel {native_status()}"
    return triton_skip_reason() if backend == "triton" else None


def _entropy_entry(backend):
    dev = device(backend) if _needs(backend) is None else "cpu"  # a call that cannot run only binds

    def call(q, k, **kw):
        return attention_entropy(q.to(dev), k.to(dev), softmax_scale=0.3, backend=backend, **kw)

    return call


def _one_pass_entry(backend):
    dev = device(backend) if _needs(backend) is None else "cpu"

    def call(q, k, **kw):
        return attention_with_entropy(
            q.to(dev), k.to(dev), k.to(dev), softmax_scale=0.3, backend=backend, **kw
        )

    return call


def _received_entry(backend):
    dev = device(backend) if _needs(backend) is None else "cpu"

    def call(q, k, **kw):
        return attention_received(q.to(dev), k.to(dev), softmax_scale=0.3, backend=backend, **kw)

    return call


# every public entry point that takes the score modifiers, by name: (call(q, k, **keywords), why the call
# cannot run here or None); `attention_with_entropy` on the reference raises ValueError (it makes no output)
ENTRY_POINTS = {
    **{
        f"attention_entropy-{backend}": (_entropy_entry(backend), _needs(backend))
        for backend in ("auto", "reference", "torch_chunked", "native", "triton")
    },
    **{
        f"attention_with_entropy-{backend}": (_one_pass_entry(backend), _needs(backend))
        for backend in ("auto", "reference", "torch_chunked", "native", "triton")
    },
    **{
        f"attention_received-{backend}": (_received_entry(backend), _needs(backend))
        for backend in ("auto", "reference", "torch_chunked", "native", "triton")
    },
    "shard_state": (lambda q, k, **kw: shard_state(q, k, 0.3, key_offset=0, total_keys=6, **kw), None),
    "ScoreMods.build": (lambda q, k, **kw: ScoreMods.build(q, k, **kw), None),
    # below the entry points the record travels whole: these take no modifier keyword at all
    "statistics_kernel": (
        lambda q, k, **kw: statistics_kernel("auto", q, k, ScoreMods.build(q, k), **kw),
        None,
    ),
    "merge_states": (
        lambda q, k, **kw: merge_states(
            shard_state(q, k, 0.3, key_offset=0, total_keys=6), sink_state(torch.zeros(4), 1, 6), **kw
        ),
        None,
    ),
    "sink_state": (lambda q, k, **kw: sink_state(torch.zeros(4), 1, 6, **kw), None),
}
