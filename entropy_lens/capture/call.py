"""What the attention function reads: the session a recorder or scale context sets, and one call of the
function as a record (`LayerCall`), its scores' modifiers and mask in the kernels' form (`ScoreMods`).

What to do is read from a context variable: `activate(session)` sets it for a block (as
`ScaleSession`/`EntropyRecorder` do), `active_session()` reads it. A model left with the attention
function outside any session behaves exactly like sdpa. What the session's consumer asks for and is handed
is capture/reports.py's protocol (`Session.reports`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

import torch

from entropy_lens.capture.fused import PathChoices
from entropy_lens.capture.reports import Reports
from entropy_lens.capture.schedule import Schedule
from entropy_lens.capture.shards import ShardedSequence
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import DEFAULT_MEASURE, Measure, require
from entropy_lens.kernels import ScoreMods
from entropy_lens.kernels.contract import (
    SAFE_SCORE,
    check_finite,
    first_real_key,
    score_bound,
    validate_mask,
    validate_scale,
    validate_window,
)
from entropy_lens.kernels.masks import as_key_padding

# Keyword arguments models pass to their attention function that change nothing here: positions and
# cache flags (RoPE is applied before the call, the mask carries causality, padding and a sliding
# window: sdpa ignores `sliding_window` for the same reason) and unrelated MoE flags. Any other
# argument with a value is refused (`check_kwargs`): an extra dropped on the floor would change the
# output and the entropy without a word.
IGNORED_KWARGS = frozenset(
    (
        "position_ids",
        "use_cache",
        "cache_position",
        "sliding_window",
        "output_attentions",
        "output_hidden_states",  # generate(output_hidden_states=True) passes it down: the layers' outputs
        "is_causal",
        "output_router_logits",
        "num_items_in_batch",  # transformers.Trainer's loss normaliser, passed down to every layer
    )
)


@dataclass
class Session:
    """What the attention function does while a recorder/scale context is active.

    scales:     the multipliers s (λ = s · the model's own scale): None (model as trained), a float
                (uniform), or a (layers, Hq) tensor.
    schedule:   None, or a Schedule: query row i is scaled by m(i) as well (output and statistics).
    reports:    the consumer of the layers' reports (capture/reports.py's protocol): what it asks for is
                computed and handed to it (the row statistics, non-finite inputs, the key statistics'
                column state, the last rows' probabilities, a kept block); the default asks nothing, and
                a layer captures only for a consumer that reads the row statistics. Its owner sets it.
    measure:    what to measure (flags.Measure, parsed by the session's owner): the row statistics, the
                key statistics (attention received by each key; () for none), the statistics' parameters,
                the backend and the fused mode; passed whole to the routes and the kernels.
    own_attention: the model's own attention implementation the session replaced ("eager", "sdpa", ...;
                None for layers routed by capture/own_attention.py): a call that asks for the attention
                weights (`output_attentions`) of an eager model gets eager's, as without the session.
    """

    scales: float | torch.Tensor | None = None
    schedule: Schedule | None = None  # query-position multipliers m(i) (capture/schedule.py)
    reports: Reports = field(default_factory=Reports)  # the consumer (capture/reports.py)
    own_attention: str | None = None
    # what to measure, parsed where the session's owner was made (entropy_lens/flags.py); a raw value is refused
    measure: Measure = DEFAULT_MEASURE
    paths: set[str] = field(default_factory=set)  # what computed the layers: kernels.plan's path names
    backends: set[str] = field(default_factory=set)  # the kernels that computed the statistics
    mask_memo: dict = field(default_factory=dict)  # (id(mask), T, S, causal) -> (mask, kernels' form)
    # layer -> the keys (and values) of its cache that an earlier forward's check covered: a decode step
    # that continues them (S − T of them) checks its T new ones alone (`check_finite_inputs`)
    checked_keys: dict = field(default_factory=dict)
    # each batch row's first real key in this forward, from its 2-D padding mask (the recorder sets it):
    # (B|1,) int64 and the keys that mask covers, or (None, None): the forward had no mask at all, key 0 for
    # any number of keys; None where the forward's padding is not known (a 4-D mask given): read off each
    # layer's mask
    padding_start: tuple[torch.Tensor | None, int | None] | None = None
    # (B,) int64 each sequence's real prompt tokens in a generation (GenerationRecorder sets it): where
    # a row-slice statistic's built-in spans prompt and generated part; None outside a generation
    prompt_len: torch.Tensor | None = None
    choices: PathChoices | None = None  # what fused "auto" measured and kept; None: PROCESS_CHOICES
    # None, or a ShardedSequence: the model runs on one shard of each sequence
    # (--context-parallel); the attention function gathers K and V and aligns the queries by position
    context: ShardedSequence | None = None
    # the tokens the forward's KV cache held before it (ScaleSession's decoder hook: `cache_length`); None
    # without a cache. A pre-allocated cache (transformers' StaticCache, a static sliding layer before it
    # is full) hands each layer all its slots, the first cache_seen + T of them written: `read_call` keeps
    # those, so that query i is key cache_seen + i, as in a cache that grows
    cache_seen: int | None = None

    def __post_init__(self):
        require(measure=self.measure)


_ACTIVE: ContextVar[Session | None] = ContextVar("entropy_lens_session", default=None)


@contextlib.contextmanager
def activate(session: Session) -> Iterator[Session]:
    """Make `session` what the attention function follows inside the block (restored after it)."""
    token = _ACTIVE.set(session)
    try:
        yield session
    finally:
        _ACTIVE.reset(token)


def active_session() -> Session | None:
    """The session set by the innermost `activate` block, or None (the model runs as sdpa)."""
    return _ACTIVE.get()


def check_kwargs(module, kwargs: dict) -> None:
    """Refuse an attention argument this implementation would not apply (see IGNORED_KWARGS)."""
    unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in IGNORED_KWARGS)
    if unknown:
        raise EntropyLensError(
            f"{type(module).__name__} passes {', '.join(unknown)} to its attention function, which "
            "entropy_lens does not implement: its output and entropy would silently differ from the "
            "model's, so the capture refuses. Please report the architecture (README: Supported "
            "architectures)"
        )


@dataclass
class LayerCall:
    """One call of the attention function as read off its arguments and the session."""

    module: object
    session: Session | None
    query: torch.Tensor  # (B, Hq, T, D) after RoPE and the schedule's m(i)
    key: torch.Tensor  # (B, Hkv, S, D)
    value: torch.Tensor  # (B, Hkv, S, Dv)
    attention_mask: torch.Tensor | None  # transformers' mask
    dropout: float
    kwargs: dict  # the model's remaining arguments, for sdpa / its eager attention
    model_scaling: float  # the model's own softmax scale, transformers' `scaling` (module.scaling by default)
    scale: float | torch.Tensor | None  # the session's scale s_h for this layer: None, uniform or (Hq,)
    output_query: torch.Tensor  # the output path's queries: per-head scales applied
    output_scaling: float  # the `scaling` sdpa gets for the output: model_scaling × a uniform scale
    extras: ScoreMods  # softcap, sinks, ALiBi slopes, key bias (causality and the mask: `layer_inputs`)
    eager_extras: dict  # softcap and sinks as the model passed them, for its own eager attention
    # how the separate route makes the output: None is `paths.sdpa(call)`; a sharded layer passes
    # `context.bottom_right_sdpa(call, inputs)`, its queries being the last of longer keys
    sdpa_output: Callable[[LayerCall, LayerInputs], tuple] | None = None
    # the layer's output as its own code computes it, (out (B, T, Hq, Dv), None): BLOOM's routed layers
    # pass it (capture/own_attention.py) so that a training step can keep it bit for bit
    own_output: Callable[[], tuple] | None = None

    @property
    def capturing(self) -> bool:
        """Whether the layer captures: its session's consumer reads the row statistics."""
        return self.session is not None and self.session.reports.asks_stats

    @property
    def wants_keys(self) -> bool:
        """Whether the layer records key statistics: it captures, its session measures some and the
        consumer reads their column state."""
        session = self.session
        return self.capturing and bool(session.measure.key_stats) and session.reports.asks_key_state

    @property
    def kept_block(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """((rows), (keys)) of the block the session's consumer keeps (`keep_block`: query positions a..b,
        keys c..d) where the call holds it: rows a..b among its own (a decode step's rows at the end of
        its keys); None where it does not, or none is kept."""
        kept = None if self.session is None else self.session.reports.keep_block
        if kept is None:
            return None
        (a, b), (c, d) = kept
        T, S = self.query.shape[2], self.key.shape[2]
        if not (S - T <= a and b <= S and d <= S):
            return None
        return (a - (S - T), b - (S - T)), (c, d)

    @property
    def softmax_scale(self) -> float | torch.Tensor:
        """λ_h for the statistics: model_scaling × s_h, detached (float or (Hq,))."""
        s = self.scale
        return self.model_scaling * (s.detach().float() if isinstance(s, torch.Tensor) else (s or 1.0))

    @property
    def wants_grad(self) -> bool:
        tensors = (self.output_query, self.key, self.value)
        return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def read_call(session, module, query, key, value, attention_mask, scaling, dropout, kwargs) -> LayerCall:
    """The call's inputs: the extras taken out of `kwargs` (any other argument with a value refused),
    the schedule's m(i) applied to the queries, and the session's scales split between the output
    path (queries or sdpa's scale) and the statistics' λ_h."""
    sinks = kwargs.pop("s_aux", None)
    sinks = kwargs.pop("sinks", None) if sinks is None else sinks
    softcap = kwargs.pop("softcap", None)
    alibi_slopes, key_bias = kwargs.pop("alibi_slopes", None), kwargs.pop("key_bias", None)
    own_output = kwargs.pop("own_output", None)
    if session is not None and session.context is not None and session.reports.probe_rows:
        raise EntropyLensError(
            "--context-parallel does not probe the last rows' attention (a passkey run): their keys "
            "live on every rank; run it in one process"
        )
    written = None if session is None or session.cache_seen is None else session.cache_seen + query.shape[2]
    if written is not None and written < key.shape[2]:  # a pre-allocated cache: its written slots alone
        key, value = key[:, :, :written], value[:, :, :written]
        if isinstance(attention_mask, torch.Tensor) and attention_mask.ndim == 4:
            attention_mask = attention_mask[..., :written]
        if key_bias is not None:
            key_bias = key_bias[..., :written]
    extras = ScoreMods.build(
        query, key, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes, key_bias=key_bias
    )
    check_kwargs(module, kwargs)
    if scaling is None:
        scaling = module.scaling
    if session is not None and session.schedule is not None:  # m(i) per query row, before anything
        query = query * _row_multipliers(session.schedule, kwargs.get("position_ids"), query, key)
    scale = None if session is None else session.scales
    if isinstance(scale, torch.Tensor):
        scale = scale[module.layer_idx]  # (Hq,)
    output_query, output_scaling = query, scaling
    if isinstance(scale, torch.Tensor):
        output_query = query * scale.to(query.dtype).view(1, -1, 1, 1)
    elif scale is not None:
        output_scaling = scaling * float(scale)
    return LayerCall(
        module=module,
        session=session,
        query=query,
        key=key,
        value=value,
        attention_mask=attention_mask,
        dropout=dropout,
        kwargs=kwargs,
        model_scaling=scaling,
        scale=scale,
        output_query=output_query,
        output_scaling=output_scaling,
        extras=extras,
        eager_extras={k: v for k, v in (("softcap", softcap), ("s_aux", sinks)) if v is not None},
        own_output=own_output,
    )


DEFERRED_CHECK_DEVICES = ("cuda",)  # where reading a check is a synchronisation of the device


def check_finite_inputs(call: LayerCall) -> torch.Tensor | None:
    """EntropyLensError, in one line naming the layer, where the model hands a capturing layer a query,
    key or value that is not finite (overflow in bf16/fp16, NaN weights): its statistics would be
    undefined, and the kernels would otherwise turn them into finite numbers nobody flags. One pass over
    q, k and v (O(T·D)), beside the layer's O(T²·D) scores; a decode step that continues the cache an
    earlier forward of the session checked (S − T keys at that layer: `Session.checked_keys`) checks its
    T new keys and values alone, so a step costs O(T·D) here, not O(S·D).

    On a GPU, in a session whose consumer reads the check with the statistics (`stats_check_inputs`:
    the recorder's HostSums) and asks for neither the last rows nor non-finite reports, the check is
    returned unread, (4,) bool on the device (query, key, value finite; the scores'
    `contract.score_bound` within SAFE_SCORE, which the kernels then leave unread:
    `contract.score_range_checked`), and refused there, where the statistics reach the host: reading it
    here would stop the host at every layer until the device caught up. None: checked here."""
    session = call.session
    T, S, layer = call.query.shape[2], call.key.shape[2], getattr(call.module, "layer_idx", None)
    # a decode step continuing the cache an earlier forward checked: its new keys and values alone
    seen, largest_key = session.checked_keys.get(layer, (None, None))
    new = S - T if S > T and seen == S - T else 0
    tensors = (("query", call.query), ("key", call.key[:, :, new:]), ("value", call.value[:, :, new:]))
    # a float64 sum is finite exactly where every term is (no float32/16 value overflows it): one pass each
    finite = torch.isfinite(torch.stack([x.detach().sum(dtype=torch.float64) for _, x in tensors]))
    session.checked_keys[layer] = (S, None)
    reports = session.reports
    deferred = reports.stats_check_inputs and not reports.probe_rows and not reports.asks_nonfinite
    if deferred and call.query.device.type in DEFERRED_CHECK_DEVICES:
        scale = validate_scale(call.query, call.key, call.softmax_scale)
        bound = score_bound(call.query, call.key, scale, call.extras, on_device=True)
        return torch.cat([finite, (bound <= SAFE_SCORE).view(1)])
    if bool(
        finite.all()
    ):  # one host sync per layer; the place of a bad value is found only when there is one
        # max|k| over the cache, its new keys taken in: a decode step's score bound without a pass over S
        keys = tensors[1][1].detach()  # a 0-d tensor, unread: the bound's comparison is the one read
        fresh = torch.linalg.vector_norm(keys, ord=math.inf) if keys.numel() else keys.new_zeros(())
        if new == 0:
            largest_key = fresh
        elif largest_key is not None:
            largest_key = torch.maximum(largest_key, fresh)
        session.checked_keys[layer] = (S, largest_key)
        return None
    layer = getattr(call.module, "layer_idx", "?")
    fix = (
        "the model produced NaN or inf before attention: check its weights, and run in float32 "
        "(--dtype float32) if bfloat16/float16 overflowed"
    )
    for name, x in tensors:
        try:
            check_finite(x, f"layer {layer}'s {name}", fix=fix)
        except ValueError as err:
            raise EntropyLensError(str(err)) from None


def checked_inputs(call: LayerCall) -> tuple[LayerCall, torch.Tensor | None]:
    """`check_finite_inputs` of a capturing layer: (call, its unread check or None). Where the inputs are
    not finite and the session's consumer asks to be told (`report_nonfinite`: a monitor's), the layer is
    reported and runs as one that captures nothing (the call without its session, its numbers the model's
    own); else refused (a scan's). A layer that captures nothing: (call, None), unchecked."""
    if not call.capturing:
        return call, None
    try:
        return call, check_finite_inputs(call)
    except EntropyLensError as err:
        reports = call.session.reports
        if not reports.asks_nonfinite:
            raise
        reports.report_nonfinite(call.module.layer_idx, str(err))
        return replace(call, session=None), None


def decode_range_known(call: LayerCall) -> bool:
    """Whether a decode step's scores are known to lie within float32's range (`contract.score_bound` at
    most SAFE_SCORE) from max|k| over its cache, which `check_finite_inputs` kept up with its new keys:
    then the kernels skip their own pass over the cache for it (`contract.score_range_checked`)."""
    T, S = call.query.shape[2], call.key.shape[2]
    known = call.session.checked_keys.get(getattr(call.module, "layer_idx", None), (None, None))
    if S <= T or known != (S, known[1]) or known[1] is None:
        return False
    scale = validate_scale(call.query, call.key, call.softmax_scale)
    return score_bound(call.query, call.key, scale, call.extras, largest_key=known[1]) <= SAFE_SCORE


@dataclass
class LayerInputs:
    """The kernels' view of a call: the keys and values the statistics see, and every score modifier
    (causality as sdpa applies it, the mask and window in the kernels' form, the call's extras)."""

    key: torch.Tensor  # (B, Hkv, S', D): S' = T for a prefill into an empty static cache, else S
    value: torch.Tensor
    mods: ScoreMods


def layer_inputs(call: LayerCall) -> LayerInputs:
    """What the kernels take for `call` (see LayerInputs); errors as `kernels.attention_entropy`'s."""
    causal = call.kwargs.get("is_causal")
    causal = getattr(call.module, "is_causal", True) if causal is None else causal
    memo = call.session.mask_memo if call.session is not None else {}
    T, S = call.query.shape[2], call.key.shape[2]
    mask, window = _kernel_mask(memo, call.attention_mask, T, S, causal)
    if mask is not None and mask.shape[2] != 1:
        causal = False  # as in sdpa, a mask that is not key padding (and a window) decides alone
    key, value, extras = call.key, call.value, call.extras
    if causal and call.attention_mask is None and 1 < T < S:
        key, value = key[:, :, :T], value[:, :, :T]  # as sdpa: a prefill into an empty static cache
        if extras.key_bias is not None:
            extras = extras.replace(key_bias=extras.key_bias[..., :T])
    mask = validate_mask(call.query, key, mask)
    mods = extras.replace(
        causal=bool(causal),
        mask=mask,
        window=validate_window(window, causal),
        first_key=_first_key(call, memo, key.shape[2], mask),
    )
    return LayerInputs(key, value, mods)


def _first_key(call: LayerCall, memo: dict, S: int, mask) -> torch.Tensor | None:
    """(B|1,) int64: each batch row's first real key, where first_mass's K keys begin: from the forward's
    2-D padding mask where the session holds one covering the S keys (a sliding window's mask hides the
    keys behind it, padded or not), or more than S: a cropped cache (a sliding layer's, while decoding)
    holds the last S of the mask's keys, so the first real key lies that many keys earlier, maybe before
    the cache (negative: none of first_mass's keys, or only its last, are still there); else the first
    key the layer's mask (the kernels' form: causal and window taken out) lets through
    (`kernels.contract.first_real_key`)."""
    known = None if call.session is None else call.session.padding_start
    if known is not None and (known[1] is None or known[1] >= S):
        start, device = known[0], call.query.device
        if start is None or start.device == device and known[1] == S:
            return start
        key = ("padding_start", device, S)  # copied once per forward and device: a copy is a synchronisation
        if key not in memo:
            memo[key] = start.to(device) - (known[1] - S)
        return memo[key]
    key = ("first_key", id(mask), S)
    if key not in memo:
        memo[key] = (mask, first_real_key(mask))  # holds the mask: its id cannot be reused
    return memo[key][1]


def _row_multipliers(schedule: Schedule, position_ids, query, key):
    """(B|1, 1, T, 1) multipliers m(i) in query's dtype: positions from `position_ids` when the model
    passes them, else the last T of the S key positions (a prefill from 0, or decoding on a cache)."""
    T, S = query.shape[2], key.shape[2]
    if position_ids is None:
        position_ids = torch.arange(S - T, S, device=query.device).unsqueeze(0)
    m = schedule.multiplier(position_ids.to(query.device))
    return m.view(m.shape[0], 1, T, 1).to(query.dtype)


def _kernel_mask(memo: dict, attention_mask, T: int, S: int, causal: bool):
    """(mask, window): the layer's mask as the kernels take it. The mask is bool (True = attend; a
    user's additive float mask is converted); where transformers' mask is causal + key padding, with
    or without a sliding window, it becomes (B, 1, 1, S) key padding (None when nothing is padded)
    and the window, which the Triton kernel serves and by which both kernels skip key blocks. Layers
    of a forward share a few mask objects (full and sliding-window layers): the check (one pass over
    T x S) runs once per object per forward."""
    if attention_mask is None:
        return None, None
    key = (id(attention_mask), T, S, causal)
    if key in memo:
        return memo[key][1]
    mask, window = attention_mask, None
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    if mask.ndim == 4:
        form = as_key_padding(mask, mask.shape[0], T, S, causal)
        if form is not None:
            mask, window = form
    memo[key] = (attention_mask, (mask, window))  # holds the object: its id cannot be reused
    return mask, window
