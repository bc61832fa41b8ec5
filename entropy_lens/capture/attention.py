"""The `entropy_lens` attention implementation registered with transformers.

Registered under one name with BOTH `AttentionInterface` (the function below) and
`AttentionMaskInterface` (transformers' sdpa mask builder). Without the mask registration
transformers builds no mask for an unknown implementation and padding is silently ignored.

For every attention layer the function takes three steps:
  1. read the call (capture/call.py: `read_call`, then `layer_inputs` where statistics or extras are
     computed): take out softcap (Gemma2), attention sinks (gpt-oss's `s_aux`) and ALiBi
     (`alibi_slopes`, or Falcon's `key_bias`, from capture/own_attention.py's layers) into one
     `kernels.ScoreMods` and refuse any other extra argument (`check_kwargs`); apply the effective
     scale λ_h = s_h · the model's scale (s_h the per-head scale; `--scale s` is s_h = s for all
     heads): a uniform scale goes into sdpa's own `scale`, per-head multipliers multiply the
     queries (after RoPE), so a trainable scale tensor gets gradients; put the mask in the
     kernels' form;
  2. run a route (capture/paths.py): `kernels.plan` names the routes the layer can take under the
     session's --backend and --fused, each a path and the kernel that computes its statistics, and
     capture/fused.py times the two under `--fused auto`. A layer that captures nothing runs sdpa, its
     streamed route where sdpa cannot compute its scores, or, for a trainable scale there, the model's
     own eager attention (autograd, T × T memory) or sdpa with the ALiBi bias as a float mask. A layer
     that captures and wants gradients (a training step) runs "fused-train": the kernel's one pass for
     the output and the statistics, PyTorch's flash backward from that output and its log-sum-exp
     (kernels/train.py), or, where that backward cannot take the scores (softcap, sinks, ALiBi), the
     model's output with autograd beside a statistics pass;
  3. record what ran (`record`): the route's path in `session.paths` and, when capturing, its kernel in
     `session.backends`, both in `kernels.plan`'s vocabulary, so metadata names what ran, and hand the
     session's consumer what it asks for (capture/reports.py: the row statistics, the key statistics'
     column state, a kept block, the last rows' probabilities).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from entropy_lens.capture.call import (
    active_session,
    checked_inputs,
    decode_range_known,
    layer_inputs,
    read_call,
)
from entropy_lens.capture.context_parallel import sharded_attention
from entropy_lens.capture.paths import (
    EAGER,
    SDPA,
    SDPA_ALIBI,
    alibi_attention,
    eager_attention,
    record,
    run_path,
    sdpa,
)
from entropy_lens.capture.received import column_pass
from entropy_lens.capture.slices import block_pass, slice_pass, wants_slices
from entropy_lens.kernels.contract import autocast_dtype, score_range_checked

ATTN_NAME = "entropy_lens"


def register() -> None:
    """Register the implementation and its mask builder (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_NAME, entropy_lens_attention)
    AttentionMaskInterface.register(ATTN_NAME, entropy_lens_mask)


def entropy_lens_mask(*args, **kwargs):
    """transformers' sdpa mask; None under a sharded session (--context-parallel), whose attention
    builds causality, windows and padding from true positions and never reads a mask of the local
    tokens (capture/context_parallel.py)."""
    from transformers.masking_utils import sdpa_mask

    session = active_session()
    if session is not None and session.context is not None:
        return None
    return sdpa_mask(*args, **kwargs)


def entropy_lens_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention signature: query (B, Hq, T, D), key/value (B, Hkv, S, D). Reads the call,
    runs the route chosen for it, and records what ran (a sharded session: capture/context_parallel.py).

    Under autocast the layer runs as sdpa does there: query, key and value in autocast's dtype (a model's
    queries after RoPE are often float32 beside bfloat16 values), then with autocast off inside, so every
    route sees one dtype, the kernels keep their float32 sums and the statistics are those of the scores
    the step computes (`autocast_dtype`)."""
    dtype = autocast_dtype(query.device.type)
    if dtype is None:
        return _attention(module, query, key, value, attention_mask, scaling, dropout, kwargs)
    query, key, value = (x.to(dtype) for x in (query, key, value))
    own_output = kwargs.get("own_output")  # BLOOM's own attention code runs as the model's, under autocast
    if own_output is not None:
        kwargs["own_output"] = functools.partial(_under_autocast, own_output, query.device.type, dtype)
    with torch.autocast(query.device.type, enabled=False):
        return _attention(module, query, key, value, attention_mask, scaling, dropout, kwargs)


def _under_autocast(fn, device_type: str, dtype):
    with torch.autocast(device_type, dtype=dtype):
        return fn()


def _attention(module, query, key, value, attention_mask, scaling, dropout, kwargs):
    session = active_session()
    if session is not None and session.context is not None:
        return sharded_attention(session, module, query, key, value, scaling, dropout, kwargs)
    call = read_call(session, module, query, key, value, attention_mask, scaling, dropout, kwargs)
    # statistics of non-finite scores are undefined: refused, naming the layer, or reported (a monitor's)
    # and the layer captures nothing; inputs_finite: the check, left unread to the statistics' consumer
    call, inputs_finite = checked_inputs(call)
    inputs = None  # the kernels' view of the call, where a route needs it
    if not call.capturing and call.extras.sdpa_computes:  # nothing to capture, nothing sdpa cannot do
        out = sdpa(call)
        record(call, SDPA)
    elif not call.capturing and call.wants_grad:  # a trainable scale through softcap, sinks or ALiBi
        alibi = call.extras.biased
        out = alibi_attention(call) if alibi else eager_attention(call, layer_inputs(call).mods)
        record(call, SDPA_ALIBI if alibi else EAGER)
    else:
        inputs = layer_inputs(call)
        # the scores' range, where inputs_finite holds it, is read with the statistics, not by the kernels;
        # a decode step's is known from its cache's largest key (decode_range_known)
        checked = inputs_finite is not None or decode_range_known(call)
        with score_range_checked() if checked else contextlib.nullcontext():
            ran = run_path(call, inputs)  # 1. the row pass: the output, the row statistics, their LSE
            rows, block = dict(ran.rows), None  # and the row-slice statistics, a kept block, on that LSE
            if wants_slices(call):
                rows |= slice_pass(call, inputs, ran.route, ran.rows)
                block = block_pass(call, inputs, ran.rows)
            keys = column_pass(call, inputs, ran.route, ran.rows) if call.wants_keys else None  # 2.
        # 3. the bookkeeping, outside the block: the last rows' probabilities, where asked, check their range
        record(
            call, ran.route.path, ran.route, inputs, rows, keys=keys, inputs_finite=inputs_finite, block=block
        )
        out = ran.returned
    return out
