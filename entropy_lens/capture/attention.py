"""The `entropy_lens` attention implementation registered with transformers.

Registered under one name with BOTH `AttentionInterface` (the function below) and
`AttentionMaskInterface` (transformers' sdpa mask builder). Without the mask registration
transformers builds no mask for an unknown implementation and padding is silently ignored.

For every attention layer the function takes three steps:
  1. read the call (`read_call`, then `entropy_inputs` where an entropy or an extra is computed): take
     out softcap (Gemma2), attention sinks (gpt-oss's `s_aux`) and ALiBi (`alibi_slopes`, or Falcon's
     `key_bias`, from capture/own_attention.py's layers) and refuse any other extra argument
     (`check_kwargs`); apply the effective scale λ_h = m_h · module.scaling (m_h the per-head
     multiplier of 1/√d; `--scale s` is m_h = s for all heads): a uniform multiplier goes into sdpa's
     own `scale`, per-head multipliers multiply the queries (after RoPE), so a trainable multiplier
     tensor gets gradients; put the mask in the kernels' form and let `kernels.backend_for` name the
     entropy backend;
  2. run a path (capture/paths.py, which names them). A capturing layer runs "sdpa-then-entropy"
     (sdpa's output, then the entropy kernel on the same post-RoPE q, k at λ_h), "triton-fused" (the
     Triton kernel's one pass) or "torch-streamed" (`kernels.attention_with_entropy_torch`: output,
     entropy and sink mass from the same score tiles, exact: the CPU fused pass where the native
     kernel cannot build, and the separate pass of a layer with softcap or sinks, which sdpa cannot
     compute) or "native" (the same in one C++ kernel: the CPU fused pass); capture/fused.py decides
     between the separate and the fused way, by measurement under `--fused auto`. A layer that
     captures nothing runs sdpa, torch-streamed where sdpa cannot, or, for a trainable scale there,
     the model's own eager attention (autograd, T × T memory);
  3. record what ran (`record`): the path's name in `session.paths` and, when capturing, the kernel
     that computed the entropy in `session.backends` ("torch_chunked" for torch-streamed, "native" for
     native), so
     metadata names what ran; the entropy goes to the session's callback.
What to do is read from a context variable: `activate(session)` sets it for a block (as
`ScaleSession`/`EntropyRecorder` do), `active_session()` reads it. A model left with this
implementation outside any session behaves exactly like sdpa.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from entropy_lens.capture.fused import PathChoices
from entropy_lens.capture.paths import (
    EAGER,
    NATIVE,
    SDPA,
    SDPA_ALIBI,
    TORCH_STREAMED,
    alibi_attention,
    eager_attention,
    run_path,
    sdpa,
)
from entropy_lens.capture.schedule import Schedule
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import attention_probabilities, backend_for
from entropy_lens.kernels.contract import validate
from entropy_lens.kernels.masks import as_key_padding

ATTN_NAME = "entropy_lens"
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
        "is_causal",
        "output_router_logits",
    )
)


@dataclass
class Session:
    """What the attention function does while a recorder/scale context is active.

    scales:     the multipliers s (λ = s · the model's own scale): None (model as trained), a float
                (uniform), or a (layers, Hq) tensor.
    schedule:    None, or a Schedule: query row i is scaled by m(i) as well (output and entropy).
    on_entropy:  None, or a callback (layer_idx, entropy (B, Hq, T) fp32, key_offset S − T), with a
                 fourth argument sink_mass (B, Hq, T) fp32 for a model with attention sinks.
    """

    scales: float | torch.Tensor | None = None
    schedule: Schedule | None = None  # query-position multipliers m(i) (capture/schedule.py)
    on_entropy: Callable[..., None] | None = None
    backend: str = "auto"
    fused: str = "auto"  # capture/fused.py: "auto" | "on" | "off"
    paths: set[str] = field(default_factory=set)  # what computed the layers: capture/paths.py's names
    backends: set[str] = field(default_factory=set)  # the entropy kernels that ran: "triton", ...
    mask_memo: dict = field(default_factory=dict)  # (id(mask), T, S, causal) -> (mask, kernels' form)
    choices: PathChoices | None = None  # what fused "auto" measured and kept; None: PROCESS_CHOICES
    # the last rows' attention, whole: on_rows(layer_idx, p (B, Hq, R, S) float64) for the last
    # `probe_rows` query rows of each call (passkey's answer rows), from `last_rows_probabilities`
    on_rows: Callable[[int, torch.Tensor], None] | None = None
    probe_rows: int = 0


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


def register() -> None:
    """Register the implementation and its mask builder (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, entropy_lens_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


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
    """One call of the attention function as read off its arguments and the session: what the output
    path takes and, for the entropy, what the kernels take (`entropy_inputs`)."""

    module: object
    session: Session | None
    query: torch.Tensor  # (B, Hq, T, D) after RoPE and the schedule's m(i)
    key: torch.Tensor  # (B, Hkv, S, D)
    value: torch.Tensor  # (B, Hkv, S, Dv)
    attention_mask: torch.Tensor | None  # transformers' mask
    dropout: float
    kwargs: dict  # the model's remaining arguments, for sdpa / its eager attention
    scaling: float  # the model's softmax scale (module.scaling unless it passes one)
    scale: float | torch.Tensor | None  # the session's s_h for this layer: None, uniform or (Hq,)
    q_out: torch.Tensor  # the output path's queries: per-head multipliers applied
    out_scaling: float  # the output path's softmax scale: a uniform multiplier applied
    softcap: float | None  # Gemma2: scores -> c·tanh(scores/c)
    sinks: torch.Tensor | None  # gpt-oss: one logit per head in the softmax's denominator
    alibi_slopes: torch.Tensor | None = None  # (Hq,) fp32: −slope_h·(i − j) added to the scores (BLOOM,
    # MPT, passed by capture/own_attention.py); the scales multiply q·k, not this bias
    key_bias: torch.Tensor | None = None  # (B, Hq, S): a bias per key (Falcon's ALiBi, as it rounds it)

    @property
    def capturing(self) -> bool:
        return self.session is not None and self.session.on_entropy is not None

    @property
    def has_extras(self) -> bool:
        return any(x is not None for x in (self.softcap, self.sinks, self.alibi_slopes, self.key_bias))

    @property
    def softmax_scale(self) -> float | torch.Tensor:
        """λ_h for the entropy: the model's scaling times the scales s_h, detached (float or (Hq,))."""
        m = self.scale
        return self.scaling * (m.detach().float() if isinstance(m, torch.Tensor) else (m or 1.0))

    @property
    def wants_grad(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in (self.q_out, self.key, self.value))


@dataclass
class EntropyInputs:
    """The kernels' view of a call: keys/values the entropy sees, mask and window in the kernels' form,
    causality as sdpa applies it, and the backend `kernels.backend_for` picks for them."""

    key: torch.Tensor  # (B, Hkv, S', D): S' = T for a prefill into an empty static cache, else S
    value: torch.Tensor
    causal: bool
    mask: torch.Tensor | None
    window: int | None
    backend: str

    def args(self, call: LayerCall) -> dict:
        """The keyword arguments every kernel takes alike."""
        return {
            "causal": self.causal,
            "mask": self.mask,
            "window": self.window,
            "softcap": call.softcap,
            "sinks": call.sinks,
            "alibi_slopes": call.alibi_slopes,
            "key_bias": call.key_bias,
        }


def entropy_lens_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention signature: query (B, Hq, T, D), key/value (B, Hkv, S, D). Reads the call,
    runs the path chosen for it, and records what ran."""
    call = read_call(_ACTIVE.get(), module, query, key, value, attention_mask, scaling, dropout, kwargs)
    inputs = None  # the kernels' view of the call, where a path needs it
    if not call.capturing and not call.has_extras:  # nothing to capture, nothing sdpa cannot do
        out = sdpa(call)
        record(call, SDPA)
    elif not call.capturing and call.wants_grad:  # a trainable scale through softcap, sinks or ALiBi
        alibi = call.alibi_slopes is not None or call.key_bias is not None
        out = alibi_attention(call) if alibi else eager_attention(call)
        record(call, SDPA_ALIBI if alibi else EAGER)
    else:
        inputs = entropy_inputs(call)
        path, (out, entropy, sink_mass) = run_path(call, inputs)
        record(call, path, inputs, entropy, sink_mass)
    session = call.session
    if session is not None and session.on_rows is not None:
        session.on_rows(module.layer_idx, last_rows_probabilities(call, session.probe_rows, inputs))
    return out


def last_rows_probabilities(call: LayerCall, rows: int, inputs: EntropyInputs | None = None) -> torch.Tensor:
    """(B, Hq, rows, S) float64: the keys' probabilities of the call's last `rows` query rows, whole
    (`kernels.attention_probabilities`: the same scores, bias, mask and sink as every path), at λ_h.
    `inputs`: the call's `entropy_inputs`, where the path already read them."""
    inputs = inputs if inputs is not None else entropy_inputs(call)
    q = call.query[:, :, -rows:].detach()
    mask = inputs.mask
    if mask is not None and mask.shape[2] > 1:
        mask = mask[:, :, -rows:]
    softmax_scale, mask = validate(q, inputs.key, call.softmax_scale, mask)
    args = inputs.args(call)
    del args["mask"]
    p, _, _ = attention_probabilities(q, inputs.key.detach(), softmax_scale, mask=mask, **args)
    return p


def read_call(session, module, query, key, value, attention_mask, scaling, dropout, kwargs) -> LayerCall:
    """The call's inputs: the extras taken out of `kwargs` (any other argument with a value refused),
    the schedule's m(i) applied to the queries, and the session's scales split between the output
    path (queries or sdpa's scale) and the entropy's λ_h."""
    softcap = kwargs.pop("softcap", None)
    alibi_slopes = kwargs.pop("alibi_slopes", None)
    key_bias = kwargs.pop("key_bias", None)
    sinks = kwargs.pop("s_aux", None)
    sinks = kwargs.pop("sinks", None) if sinks is None else sinks
    check_kwargs(module, kwargs)
    if scaling is None:
        scaling = module.scaling
    if session is not None and session.schedule is not None:  # m(i) per query row, before anything
        query = query * _row_multipliers(session.schedule, kwargs.get("position_ids"), query, key)
    scale = None if session is None else session.scales
    if isinstance(scale, torch.Tensor):
        scale = scale[module.layer_idx]  # (Hq,)
    q_out, out_scaling = query, scaling
    if isinstance(scale, torch.Tensor):
        q_out = query * scale.to(query.dtype).view(1, -1, 1, 1)
    elif scale is not None:
        out_scaling = scaling * float(scale)
    return LayerCall(
        module=module,
        session=session,
        query=query,
        key=key,
        value=value,
        attention_mask=attention_mask,
        dropout=dropout,
        kwargs=kwargs,
        scaling=scaling,
        scale=scale,
        q_out=q_out,
        out_scaling=out_scaling,
        softcap=softcap,
        sinks=sinks,
        alibi_slopes=alibi_slopes,
        key_bias=key_bias,
    )


def entropy_inputs(call: LayerCall) -> EntropyInputs:
    """What the kernels take for `call` (see EntropyInputs); errors as `kernels.attention_entropy`'s."""
    causal = call.kwargs.get("is_causal")
    causal = getattr(call.module, "is_causal", True) if causal is None else causal
    memo = call.session.mask_memo if call.session is not None else {}
    T, S = call.query.shape[2], call.key.shape[2]
    mask, window = _kernel_mask(memo, call.attention_mask, T, S, causal)
    if mask is not None and mask.shape[2] != 1:
        causal = False  # as in sdpa, a mask that is not key padding (and a window) decides alone
    key, value = call.key, call.value
    if causal and call.attention_mask is None and 1 < T < S:
        key, value = key[:, :, :T], value[:, :, :T]  # as sdpa: a prefill into an empty static cache
    backend = "auto" if call.session is None else call.session.backend
    extras = {"softcap": call.softcap, "sinks": call.sinks}
    extras |= {"alibi_slopes": call.alibi_slopes, "key_bias": call.key_bias}
    backend = backend_for(backend, call.query, key, causal=causal, mask=mask, window=window, **extras)
    return EntropyInputs(key, value, causal, mask, window, backend)


def record(call: LayerCall, path: str, inputs: EntropyInputs | None = None, entropy=None, sink_mass=None):
    """Note in the session (if any) the path that ran and, when capturing, the kernel that computed the
    entropy, and hand the entropy to the session's callback."""
    session = call.session
    if session is None:
        return
    session.paths.add(path)
    if not call.capturing:
        return
    session.backends.add({TORCH_STREAMED: "torch_chunked", NATIVE: "native"}.get(path, inputs.backend))
    offset = inputs.key.shape[2] - call.query.shape[2]
    if call.sinks is None:
        session.on_entropy(call.module.layer_idx, entropy, offset)
    else:
        session.on_entropy(call.module.layer_idx, entropy, offset, sink_mass)


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
