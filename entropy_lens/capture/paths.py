"""How a layer runs: the route `kernels.plan` gives it (its path and the kernel of its statistics, the
vocabulary of `Session.paths`/`backends` and of the results meta's `attention_path`/`backend`: see
kernels/plan.py), timed against the other under `--fused auto` (capture/fused.py), and the outputs of
layers that capture nothing.

A layer that captures nothing runs "sdpa" (`sdpa`, at the session's scale), its streamed route where it
has softcap, sinks or ALiBi, or, for a trainable scale there, "eager" (`eager_attention`: the model's
own, with autograd) or, for ALiBi, "sdpa-alibi-mask" (`alibi_attention`: the bias as sdpa's float mask).

A capturing layer that wants gradients (a training step, a trainable scale) runs the route
`kernels.train_plan` decides (the routing is decided there, in one place; this module only runs it):
"fused-train" (kernels/train.py: the one pass's output and statistics, PyTorch's flash backward from the
output and the pass's log-sum-exp), else the model's output with autograd and a separate no-grad
statistics pass: "sdpa-then-entropy" where sdpa computes the scores, "eager-then-entropy" (softcap,
sinks), "own-then-entropy" (BLOOM at the model's own scale: its layer's own attention code, so the step's
numbers are the unwatched step's bit for bit) or "sdpa-alibi-mask-then-entropy" (ALiBi, a key bias).
Attention dropout > 0 runs the latter: the output with the model's dropout, the statistics of the
attention without it.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import torch

from entropy_lens.capture.call import LayerCall, LayerInputs, layer_inputs
from entropy_lens.capture.fused import PROCESS_CHOICES
from entropy_lens.capture.received import layer_counted_rows, one_pass_keys
from entropy_lens.capture.slices import row_pass_spans, wants_slices
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Backend, Fused, Measure, Stats
from entropy_lens.kernels import Plan, Route, attention_probabilities, compile_requested, plan, run
from entropy_lens.kernels.contract import validate_mask, validate_scale
from entropy_lens.kernels.plan import (
    ALIBI_THEN_ENTROPY,
    EAGER_THEN_ENTROPY,
    FUSED_TRAIN,
    NATIVE,
    OWN_THEN_ENTROPY,
    SDPA_THEN_ENTROPY,
    TORCH_STREAMED,
    TRITON_FUSED,
    statistics_kernel,
    train_plan,
)
from entropy_lens.kernels.stats import ROW_STATS, RowStats
from entropy_lens.kernels.train import attention_train

# "auto" times one run of each way on CPU from this many scores per head (query rows x keys) on: a 1K
# window; below, a single run's time is mostly noise, and each way runs twice as on GPU (capture/fused.py)
ONE_RUN_MIN_SCORES = 1 << 20
# and, for a layer that captures nothing, also:
SDPA = "sdpa"  # the model as sdpa runs it, at the session's scale
EAGER = "eager"  # the model's own eager attention: a trainable scale on a layer with softcap or sinks
SDPA_ALIBI = "sdpa-alibi-mask"  # torch sdpa, the ALiBi bias as its float mask: a trainable scale on ALiBi
PATH_NAMES = (
    SDPA_THEN_ENTROPY,
    TRITON_FUSED,
    TORCH_STREAMED,
    NATIVE,
    SDPA,
    EAGER,
    SDPA_ALIBI,
    FUSED_TRAIN,
    EAGER_THEN_ENTROPY,
    ALIBI_THEN_ENTROPY,
    OWN_THEN_ENTROPY,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerRun:
    """What a layer's route gave: `route` (what ran), `out` (B, T, Hq, D) the layer's output and
    `weights` (None but from the model's eager attention) as the model's attention function returns
    them (`returned`), and `rows` the RowStats of the statistics the session captures that apply to the
    layer (none where it captures nothing)."""

    route: Route
    out: torch.Tensor
    weights: torch.Tensor | None
    rows: RowStats

    @property
    def returned(self) -> tuple:
        """(out, weights): what the model's attention function returns."""
        return self.out, self.weights


def layer_plan(call: LayerCall, inputs: LayerInputs) -> Plan:
    """The routes `kernels.plan` gives the layer under the session's --backend and --fused: a layer that
    captures nothing has only its separate route, and one that wants gradients or dropout no one pass."""
    session = call.session
    fusable = call.capturing and not call.dropout and not call.wants_grad
    backend, fused = (
        (Backend.AUTO, Fused.OFF) if session is None else (session.measure.backend, session.measure.fused)
    )
    mode = fused if fusable else Fused.OFF
    return plan(backend, mode, call.query, inputs.key, inputs.value, inputs.mods)


def run_path(call: LayerCall, inputs: LayerInputs) -> LayerRun:
    """The layer run by the plan's fixed route, or under
    `--fused auto` the one the session's PathChoices keeps for this shape (capture/fused.py); a layer
    that captures and wants gradients: `train_route`'s; one asked for eager's weights: `weights_route`'s."""
    train = weights_route(call, inputs) or train_route(call, inputs)
    if train is not None:
        return run_train(call, inputs, train)
    layer = layer_plan(call, inputs)
    if layer.fixed is not None:
        return run_route(call, inputs, layer.fixed)
    T, S = call.query.shape[2], call.key.shape[2]
    # a decode step (queries on a cache: S > T, not a shard's chunk) keys its choice by S's power of two:
    # each step's S is new, and a choice timed at one length serves the next (a scan keys its own S)
    decoding = S > T and call.session.context is None
    keys = 1 << (S - 1).bit_length() if decoding else S
    shape_key = (
        str(call.query.device),
        call.query.dtype,
        *call.query.shape,
        call.key.shape[1],
        keys,
        inputs.mods.mask is not None,
        inputs.mods.causal,
        inputs.mods.window,
        not inputs.mods.sdpa_computes,
        layer.fused.path,  # which kernel "fused" is: a choice measured for one is not kept for another
    )
    routes = {"separate": layer.separate, "fused": layer.fused}
    run_way = {way: partial(run_route, call, inputs, route) for way, route in routes.items()}
    # a warm-up run before the timed one only where a path compiles on its first call, or where the work
    # is so small that one run's timing is mostly noise (fused.py)
    big = call.query.shape[-2] * call.key.shape[-2] >= ONE_RUN_MIN_SCORES
    runs = 1 if call.query.device.type == "cpu" and not compile_requested() and big else 2
    choices = call.session.choices or PROCESS_CHOICES
    _, ran = choices.choose(Fused.AUTO, shape_key, run_way, runs=runs)
    return ran


def train_route(call: LayerCall, inputs: LayerInputs) -> Route | None:
    """The route of a capturing layer that wants gradients, as `kernels.train_plan` decides it; None for
    any other layer (and where sdpa's output with autograd and a statistics pass is the route)."""
    if not (call.capturing and call.wants_grad):
        return None
    session = call.session
    q, k, v, mods = call.output_query, inputs.key, inputs.value, inputs.mods
    return train_plan(
        session.measure.backend,
        session.measure.fused,
        q,
        k,
        v,
        mods,
        dropout=bool(call.dropout),
        own_code=own_output_applies(call),
    )


def weights_route(call: LayerCall, inputs: LayerInputs) -> Route | None:
    """The route of a capturing layer asked for its attention weights (`output_attentions=True`) in a
    model whose own attention is eager: "eager-then-entropy" (the model's eager attention makes the output
    and the weights it returns without the session, a statistics pass beside it); None otherwise."""
    session = call.session
    if not (call.capturing and call.kwargs.get("output_attentions") and session.own_attention == "eager"):
        return None
    kernel, kernel_mods = statistics_kernel(session.measure.backend, call.query, inputs.key, inputs.mods)
    return Route(EAGER_THEN_ENTROPY, kernel, kernel_mods)


def own_output_applies(call: LayerCall) -> bool:
    """Whether the layer's own attention code (`call.own_output`: BLOOM's) makes a training step's output:
    where the session changes no score (no scale, no schedule) and the layer holds its whole sequence."""
    session = call.session
    plain = call.scale is None and session.schedule is None and session.context is None
    return call.own_output is not None and plain


def measured(session, route: Route, capturing: bool = True) -> Measure:
    """The session's record with the row statistics that apply to `route`'s modifiers (sink mass only with
    sinks), none where the call captures nothing: what the route's kernel is handed."""
    measure = session.measure
    wanted = measure.stats if capturing else ()
    return measure.replace(stats=Stats(name for name in wanted if ROW_STATS[name].applies(route.mods)))


def run_train(call: LayerCall, inputs: LayerInputs, route: Route) -> LayerRun:
    """The layer run by a `train_route` route: its output with autograd and its RowStats."""
    measure = measured(call.session, route)
    if route.path == FUSED_TRAIN:
        # the output path's queries (per-head scales applied in autograd) at its uniform scale: λ_h q·k
        q, k, v = call.output_query, inputs.key, inputs.value
        rows = attention_train(q, k, v, call.output_scaling, route.mods, kernel=route.kernel, measure=measure)
        return LayerRun(route=route, out=rows.out, weights=None, rows=rows)
    if route.path == OWN_THEN_ENTROPY:
        out, weights = call.own_output()
    else:
        alibi = route.path == ALIBI_THEN_ENTROPY
        out, weights = alibi_attention(call) if alibi else eager_attention(call, inputs.mods)
    query, key = call.query.detach(), inputs.key.detach()
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    rows = run(
        route.kernel, query, key, None, softmax_scale, route.mods, measure=measure, with_lse=wants_lse(call)
    )
    return LayerRun(route=route, out=out, weights=weights, rows=rows)


def run_route(call: LayerCall, inputs: LayerInputs, route: Route) -> LayerRun:
    """The layer run by `route`: sdpa's output and the kernel's statistics-only pass for
    sdpa-then-entropy, else the kernel's one pass."""
    measure = measured(call.session, route, call.capturing)
    query, key = call.query.detach(), inputs.key.detach()
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    separate = route.path == SDPA_THEN_ENTROPY  # sdpa makes the output, the kernel the statistics
    value = None if separate else inputs.value
    kw = {"measure": measure, "with_lse": wants_lse(call)}
    if one_pass_keys(call, route.kernel):  # the column state from the same pass (capture/received.py)
        kw |= {"key_state": True, "counted": layer_counted_rows(call, inputs)}
    spans = row_pass_spans(call, inputs, route)  # span masses from the same pass (capture/slices.py)
    if spans is not None:
        kw["spans"] = spans
    rows = run(route.kernel, query, key, value, softmax_scale, route.mods, **kw)
    if not separate:
        return LayerRun(route=route, out=rows.out.contiguous(), weights=None, rows=rows)
    out, weights = sdpa(call) if call.sdpa_output is None else call.sdpa_output(call, inputs)
    return LayerRun(route=route, out=out, weights=weights, rows=rows)


def wants_lse(call: LayerCall) -> bool:
    """Whether the layer's row pass returns its rows' log-sum-exp: for the column pass (key statistics)
    or the row-slice statistics read off it."""
    return call.wants_keys or wants_slices(call)


def record(
    call: LayerCall,
    path: str,
    route: Route | None = None,
    inputs: LayerInputs | None = None,
    rows=None,
    *,
    keys=None,
    inputs_finite=None,
    block=None,
) -> None:
    """The bookkeeping of a layer (step 3 of a capture: the row pass, the column pass, this): note in the
    session (if any) the path that ran and, when capturing, the kernel that computed the statistics; hand
    the session's consumer (capture/reports.py) what it asks for: the kept `block` (capture/slices.py's
    `block_pass`; None: none), the row statistics `rows` at key offset S − T (with the unread check of the
    layer's inputs where `check_finite_inputs` returned one), the column pass's state `keys`
    (capture/received.py's `column_pass`; None: none: `report_keys`) and, captured or not, the call's last
    rows' probabilities (`last_rows_probabilities`; `inputs`: the call's `layer_inputs`, where the route
    read them)."""
    session = call.session
    if session is None:
        return
    session.paths.add(path)
    reports, layer = session.reports, call.module.layer_idx
    if call.capturing:
        session.backends.add(route.kernel)
        offset = inputs.key.shape[2] - call.query.shape[2]
        if block is not None:
            reports.report_block(layer, block)
        if inputs_finite is None:
            reports.report_stats(layer, dict(rows), offset)
        else:  # check_finite_inputs left its check to the consumer
            reports.report_stats(layer, dict(rows), offset, inputs_finite=inputs_finite)
        if keys is not None:
            report_keys(session, layer, keys, offset)
    if reports.probe_rows:
        reports.report_rows(layer, last_rows_probabilities(call, reports.probe_rows, inputs))


def report_keys(session, layer: int, state: dict[str, torch.Tensor], offset: int) -> None:
    """A layer's column `state` to the session's consumer, at key offset S − T (a decode step's rows add
    to the keys of the sequence they continue); its reader reads the statistics off it (`read_received`)."""
    session.reports.report_key_state(layer, state, offset)


def last_rows_probabilities(call: LayerCall, rows: int, inputs: LayerInputs | None = None):
    """(B, Hq, rows, S) float64: the keys' probabilities of the call's last `rows` query rows, whole
    (`kernels.attention_probabilities`: the same scores, bias, mask and sink as every path), at λ_h.
    `inputs`: the call's `layer_inputs`, where the route already read them."""
    inputs = inputs if inputs is not None else layer_inputs(call)
    q = call.query[:, :, -rows:].detach()
    mods = inputs.mods
    if mods.mask is not None and mods.mask.shape[2] > 1:
        mods = mods.replace(mask=validate_mask(q, inputs.key, mods.mask[:, :, -rows:]))
    softmax_scale = validate_scale(q, inputs.key, call.softmax_scale)
    p, _, _ = attention_probabilities(q, inputs.key.detach(), softmax_scale, mods)
    return p


def sdpa(call: LayerCall, mask=None):
    """The layer's output from torch sdpa, at the session's scale, with the call's mask (or `mask`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        call.module,
        call.output_query,
        call.key,
        call.value,
        call.attention_mask if mask is None else mask,
        dropout=call.dropout,
        scaling=call.output_scaling,
        **call.kwargs,
    )


def eager_attention(call: LayerCall, mods):
    """The layer's output from the model's own eager attention function (each modeling file defines
    `eager_attention_forward`), with autograd: a trainable scale on a model with softcap or sinks, or
    the weights an eager model's caller asks for. The mask registered for the capture is sdpa's bool
    mask, or None where sdpa's `is_causal` does it: then `mods` (the call's ScoreMods: causality, the
    window) make it; eager functions add theirs, so it becomes the dtype's lowest value where a key is
    hidden."""
    import sys

    module = call.module
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise EntropyLensError(
            f"{type(module).__name__} has no eager attention function to train scales through its "
            "softcap or sinks; run without gradients (the exact streaming path), or report the architecture"
        )
    mask = call.attention_mask
    if mask is None and (mods.causal or mods.mask is not None):
        mask = allowed_keys(mods, call.query.shape[2], call.key.shape[2], call.query.device)
    if mask is not None and mask.dtype == torch.bool:  # the registered sdpa mask; eager adds its mask
        low = torch.finfo(call.output_query.dtype).min
        mask = torch.zeros(mask.shape, dtype=call.output_query.dtype, device=mask.device).masked_fill_(
            ~mask, low
        )
    return fn(
        module,
        call.output_query,
        call.key,
        call.value,
        mask,
        scaling=call.output_scaling,
        dropout=call.dropout,
        **call.kwargs,
        **call.eager_extras,
    )


def allowed_keys(mods, T: int, S: int, device) -> torch.Tensor:
    """(B|1, Hq|1, T, S) bool, True where query row i may see key j under `mods`: causality bottom-right
    (query i at key position i + S − T), the sliding window and the mask."""
    rows = torch.arange(S - T, S, device=device).view(-1, 1)
    keys = torch.arange(S, device=device).view(1, -1)
    allowed = torch.ones(T, S, dtype=torch.bool, device=device)
    if mods.causal:
        allowed = allowed & (keys <= rows)
    if mods.window is not None:
        allowed = allowed & (keys > rows - mods.window)
    allowed = allowed.view(1, 1, T, S)
    return allowed if mods.mask is None else allowed & mods.mask


def alibi_attention(call: LayerCall):
    """The layer's output from torch sdpa with ALiBi as an additive float mask (B|1, Hq, T, S): the bias
    −slope_h·|i + S − T − j| (and a key bias) where the mask (or causality, without one) lets row i see
    key j, the dtype's lowest value elsewhere. Differentiable, T × S per head in memory: the trainable-scale path."""
    q, key, extras = call.output_query, call.key, call.extras
    T, S = q.shape[2], key.shape[2]
    rows = torch.arange(S - T, S, device=q.device).view(-1, 1)
    keys = torch.arange(S, device=q.device).view(1, -1)
    bias = torch.zeros(1, q.shape[1], T, S, device=q.device)
    if extras.alibi_slopes is not None:
        bias = bias - extras.alibi_slopes.view(-1, 1, 1) * (rows - keys).abs()
    if extras.key_bias is not None:
        bias = bias + extras.key_bias.unsqueeze(2)
    allowed = keys <= rows if call.attention_mask is None else call.attention_mask
    low = torch.finfo(q.dtype).min
    bias = torch.where(allowed, bias, torch.tensor(low, device=q.device)).to(q.dtype)
    return sdpa(call, bias)
