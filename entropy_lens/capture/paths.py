"""The ways a layer's output (and its entropy) are computed, by name: what `Session.paths` and the
results meta (`attention_path`) record.

    sdpa-then-entropy  torch sdpa's output (its flash kernels on GPU and CPU), then the entropy-only
                       kernel (`kernels.attention_entropy`, backend from `kernels.backend_for`) on the
                       same q, k: two passes over K
    triton-fused       the Triton kernel's WITH_OUTPUT variant: output and entropy from the same score
                       tiles, one pass over K/V (CUDA)
    torch-streamed     `kernels.attention_with_entropy_torch`: output, entropy and sink mass from the
                       same score tiles in plain torch (exact; the CPU fused pass where the native
                       kernel is unavailable, and the separate pass of a layer with softcap, sinks or
                       ALiBi, which sdpa cannot compute)
    native             `kernels.attention_with_entropy_native`: the same loop as one C++ kernel (BLAS
                       GEMMs, a vectorised softmax/entropy pass): the CPU fused pass where it builds
                       (`kernels.native_status()` says why not; the scan's meta `native` records it)
A layer that captures nothing runs "sdpa" (`sdpa`, at the session's scale), torch-streamed where it has
softcap, sinks or ALiBi, or, for a trainable scale there, "eager" (`eager_attention`: the model's own,
with autograd) or, for ALiBi, "sdpa-alibi-mask" (`alibi_attention`: the bias as sdpa's float mask).

`run_path` picks among them: the two ways of capture/fused.py, "separate" and "fused", each stand for
one of the names above depending on the layer (extras, backend), and where they name different
paths the session's `fused` mode and its PathChoices decide.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import torch

from entropy_lens.capture.fused import PROCESS_CHOICES, fused_applies
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import (
    attention_entropy,
    attention_with_entropy_native,
    attention_with_entropy_torch,
    compile_requested,
    native_available,
)

if TYPE_CHECKING:
    from entropy_lens.capture.attention import EntropyInputs, LayerCall

# What computed a layer, as `Session.paths` and the results meta (`attention_path`) name it:
SDPA_THEN_ENTROPY = "sdpa-then-entropy"  # torch sdpa's output, then an entropy-only kernel pass on q, k
TRITON_FUSED = "triton-fused"  # the Triton kernel's output + entropy pass: one pass over K/V
TORCH_STREAMED = "torch-streamed"  # kernels.attention_with_entropy_torch: output, entropy, sink mass
NATIVE = "native"  # kernels.attention_with_entropy_native: the same in one C++ kernel (CPU)
# "auto" times one run of each way on CPU from this many scores per head (query rows x keys) on: a 1K
# window; below, a single run's time is mostly noise, and each way runs twice as on GPU (capture/fused.py)
ONE_RUN_MIN_SCORES = 1 << 20
# and, for a layer that captures nothing, also:
SDPA = "sdpa"  # the model as sdpa runs it, at the session's scale
EAGER = "eager"  # the model's own eager attention: a trainable scale on a layer with softcap or sinks
SDPA_ALIBI = "sdpa-alibi-mask"  # torch sdpa, the ALiBi bias as its float mask: a trainable scale on ALiBi
PATH_NAMES = (SDPA_THEN_ENTROPY, TRITON_FUSED, TORCH_STREAMED, NATIVE, SDPA, EAGER, SDPA_ALIBI)


def run_path(call: LayerCall, inputs: EntropyInputs) -> tuple[str, tuple]:
    """(the path that ran, (layer output, entropy (B, Hq, T) fp32, sink mass or None)).

    Two ways compute a layer: "separate" (sdpa's output, then the entropy pass; for softcap or sinks,
    which sdpa cannot compute, the streamed torch path) and "fused" (one pass: `fused_path`). Where they
    differ, the session captures and the fused pass applies (capture/fused.py), `session.fused` and its
    PathChoices decide."""
    separate = TORCH_STREAMED if call.has_extras else SDPA_THEN_ENTROPY
    session = call.session
    if (
        not call.capturing
        or session.fused == "off"
        or not fused_applies(inputs.backend, call.query, call.key, call.value, inputs.mask, call.dropout)
    ):
        return separate, RUNNERS[separate](call, inputs)
    fused = fused_path(inputs.backend, call.query.device)
    if fused == separate:
        return separate, RUNNERS[separate](call, inputs)
    shapes = (*call.query.shape, *call.key.shape[1:3])
    shape_key = (
        str(call.query.device),
        call.query.dtype,
        *shapes,
        inputs.mask is not None,
        inputs.causal,
        inputs.window,
        call.has_extras,
        fused,  # which kernel "fused" is: a choice measured for one is not kept for another
    )
    run = {
        choice: partial(RUNNERS[path], call, inputs)
        for choice, path in (("separate", separate), ("fused", fused))
    }
    # a warm-up run before the timed one only where a path compiles on its first call, or where the work
    # is so small that one run's timing is mostly noise (fused.py)
    big = call.query.shape[-2] * call.key.shape[-2] >= ONE_RUN_MIN_SCORES
    runs = 1 if call.query.device.type == "cpu" and not compile_requested() and big else 2
    choice, result = (session.choices or PROCESS_CHOICES).choose(session.fused, shape_key, run, runs=runs)
    return (fused if choice == "fused" else separate), result


def fused_path(backend: str, device: torch.device) -> str:
    """The one-pass path for a layer whose entropy backend is `backend`: the Triton kernel for triton,
    on CPU the native kernel where it builds (built on the first call), else the streamed torch path."""
    if backend == "triton":
        return TRITON_FUSED
    if device.type == "cpu" and native_available():
        return NATIVE
    return TORCH_STREAMED


def _sdpa_then_entropy(call: LayerCall, inputs: EntropyInputs):
    """sdpa's output, then an entropy-only pass over the same q, k (no extras here)."""
    entropy = attention_entropy(
        call.query.detach(),
        inputs.key.detach(),
        softmax_scale=call.softmax_scale,
        backend=inputs.backend,
        **inputs.args(call),
    )
    return sdpa(call), entropy, None


def _torch_streamed(call: LayerCall, inputs: EntropyInputs):
    """Output, entropy and sink mass from the same score tiles, plain torch."""
    out, entropy, sink_mass = attention_with_entropy_torch(
        call.query.detach(), inputs.key, inputs.value, call.softmax_scale, **inputs.args(call)
    )
    return (out, None), entropy, sink_mass


def _native(call: LayerCall, inputs: EntropyInputs):
    """Output, entropy and sink mass from the same score tiles, in the native C++ kernel (CPU)."""
    out, entropy, sink_mass = attention_with_entropy_native(
        call.query.detach(), inputs.key, inputs.value, call.softmax_scale, **inputs.args(call)
    )
    return (out, None), entropy, sink_mass


def _triton_fused(call: LayerCall, inputs: EntropyInputs):
    """The Triton kernel's output + entropy pass."""
    from entropy_lens.kernels.triton_entropy import attention_with_entropy_triton

    q = call.query
    softmax_scale = torch.as_tensor(call.softmax_scale, dtype=torch.float32, device=q.device).expand(
        q.shape[1]
    )
    o, entropy, sink_mass = attention_with_entropy_triton(
        q,
        inputs.key,
        inputs.value,
        softmax_scale,
        inputs.causal,
        inputs.mask,
        inputs.window,
        call.softcap,
        call.sinks,
        call.alibi_slopes,
        return_sink_mass=True,
    )
    return (o.transpose(1, 2).contiguous(), None), entropy, sink_mass


RUNNERS = {
    SDPA_THEN_ENTROPY: _sdpa_then_entropy,
    TRITON_FUSED: _triton_fused,
    TORCH_STREAMED: _torch_streamed,
    NATIVE: _native,
}


def sdpa(call: LayerCall, mask=None):
    """The layer's output from torch sdpa, at the session's scale, with the call's mask (or `mask`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        call.module,
        call.q_out,
        call.key,
        call.value,
        call.attention_mask if mask is None else mask,
        dropout=call.dropout,
        scaling=call.out_scaling,
        **call.kwargs,
    )


def eager_attention(call: LayerCall):
    """The layer's output from the model's own eager attention function (each modeling file defines
    `eager_attention_forward`), with autograd: a trainable scale on a model with softcap or sinks."""
    import sys

    module = call.module
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise EntropyLensError(
            f"{type(module).__name__} has no eager attention function to train scales through its "
            "softcap or sinks; run without gradients (the exact streaming path), or report the architecture"
        )
    given = {name: v for name, v in (("softcap", call.softcap), ("s_aux", call.sinks)) if v is not None}
    return fn(
        module,
        call.q_out,
        call.key,
        call.value,
        call.attention_mask,
        scaling=call.out_scaling,
        dropout=call.dropout,
        **call.kwargs,
        **given,
    )


def alibi_attention(call: LayerCall):
    """The layer's output from torch sdpa with ALiBi as an additive float mask (B|1, Hq, T, S): the bias
    −slope_h·|i + S − T − j| (and a key bias) where the mask (or causality, without one) lets row i see
    key j, the dtype's lowest value elsewhere. Differentiable, T × S per head in memory: the trainable-scale path."""
    q, key = call.q_out, call.key
    T, S = q.shape[2], key.shape[2]
    rows = torch.arange(S - T, S, device=q.device).view(-1, 1)
    keys = torch.arange(S, device=q.device).view(1, -1)
    bias = torch.zeros(1, q.shape[1], T, S, device=q.device)
    if call.alibi_slopes is not None:
        bias = bias - call.alibi_slopes.float().view(-1, 1, 1) * (rows - keys).abs()
    if call.key_bias is not None:
        bias = bias + call.key_bias.float().unsqueeze(2)
    allowed = keys <= rows if call.attention_mask is None else call.attention_mask
    low = torch.finfo(q.dtype).min
    bias = torch.where(allowed, bias, torch.tensor(low, device=q.device)).to(q.dtype)
    return sdpa(call, bias)
