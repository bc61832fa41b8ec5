"""The `entropy_lens` attention implementation registered with transformers.

Registered under one name with BOTH `AttentionInterface` (the function below) and
`AttentionMaskInterface` (transformers' sdpa mask builder). Without the mask registration
transformers builds no mask for an unknown implementation and padding is silently ignored.

For every attention layer the function
  1. applies the effective scale: λ_h = m_h · module.scaling (m_h the per-head multiplier of
     1/√d; `--scale s` is m_h = s for all heads). A uniform multiplier goes into sdpa's own
     `scale`; per-head multipliers multiply the queries (after RoPE), so a trainable multiplier
     tensor gets gradients;
  2. computes the layer output with the fast path: torch sdpa (its flash/efficient kernels on GPU);
  3. when capture is on, computes the entropy of the same post-RoPE q, k with the kernel
     `attention_entropy` at scale λ_h, and hands it to the active recorder. Steps 2 and 3 may
     instead be one fused pass (the Triton kernel on CUDA, the streamed torch path on CPU;
     capture/fused.py decides, by measurement under `--fused auto`).
Softcapping (Gemma2's `softcap`) and attention sinks (gpt-oss's `s_aux`) are beyond sdpa: such layers
compute output, entropy and sink mass from the same score tiles, exactly, in plain torch
(`kernels.attention_with_entropy_torch`, path "streamed") or in the fused Triton pass; a trainable
scale on them goes through the model's own eager attention (autograd, T × T memory). Any other extra
argument is refused (`check_kwargs`).
     The session records which way the layer went (`paths`) and which kernel computed the entropy
     (`backends`, from `kernels.backend_for`; "torch_chunked" for the streamed path), so metadata names what ran.
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

from entropy_lens.capture.fused import PROCESS_CHOICES, PathChoices, fused_applies
from entropy_lens.capture.schedule import Schedule
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import attention_entropy, attention_with_entropy_torch, backend_for
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

    multipliers: None (model as trained), a float (uniform), or a (layers, Hq) tensor.
    schedule:    None, or a Schedule: query row i is scaled by m(i) as well (output and entropy).
    on_entropy:  None, or a callback (layer_idx, entropy (B, Hq, T) fp32, key_offset S − T), with a
                 fourth argument sink_mass (B, Hq, T) fp32 for a model with attention sinks.
    """

    multipliers: float | torch.Tensor | None = None
    schedule: Schedule | None = None  # query-position multipliers m(i) (capture/schedule.py)
    on_entropy: Callable[..., None] | None = None
    impl: str = "auto"
    fused: str = "auto"  # capture/fused.py: "auto" | "on" | "off"
    paths: set[str] = field(default_factory=set)  # "fused" / "separate": what the layers used
    backends: set[str] = field(default_factory=set)  # the entropy kernels that ran: "triton", ...
    mask_memo: dict = field(default_factory=dict)  # (id(mask), T, S, causal) -> (mask, kernels' form)
    choices: PathChoices | None = None  # what fused "auto" measured and kept; None: PROCESS_CHOICES


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


def entropy_lens_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention signature: query (B, Hq, T, D), key/value (B, Hkv, S, D)."""
    softcap = kwargs.pop("softcap", None)  # Gemma2: scores -> c·tanh(scores/c)
    sinks = kwargs.pop("s_aux", None)  # gpt-oss: one logit per head in the softmax's denominator
    sinks = kwargs.pop("sinks", None) if sinks is None else sinks
    check_kwargs(module, kwargs)
    if scaling is None:
        scaling = module.scaling
    session = _ACTIVE.get()
    if session is not None and session.schedule is not None:  # m(i) per query row, before anything
        query = query * _row_multipliers(session.schedule, kwargs.get("position_ids"), query, key)
    mult = None if session is None else session.multipliers
    if isinstance(mult, torch.Tensor):
        mult = mult[module.layer_idx]  # (Hq,)
    q_out, out_scaling = query, scaling
    if isinstance(mult, torch.Tensor):
        q_out = query * mult.to(query.dtype).view(1, -1, 1, 1)
    elif mult is not None:
        out_scaling = scaling * float(mult)
    extras = {"softcap": softcap, "sinks": sinks}
    has_extras = softcap is not None or sinks is not None
    capturing = session is not None and session.on_entropy is not None
    if not capturing and not has_extras:
        return _sdpa(module, q_out, key, value, attention_mask, dropout, out_scaling, kwargs)
    if not capturing and torch.is_grad_enabled() and any(t.requires_grad for t in (q_out, key, value)):
        # a trainable scale on a model with extras: the model's own eager attention, with autograd
        given = {name: v for name, v in (("softcap", softcap), ("s_aux", sinks)) if v is not None}
        eager = _eager(module)
        return eager(
            module, q_out, key, value, attention_mask, scaling=out_scaling, dropout=dropout, **kwargs, **given
        )
    lam = scaling * (mult.detach().float() if isinstance(mult, torch.Tensor) else (mult or 1.0))
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    memo = session.mask_memo if session is not None else {}
    mask, window = _kernel_mask(memo, attention_mask, query.shape[2], key.shape[2], causal)
    if mask is not None and mask.shape[2] != 1:
        causal = False  # as in sdpa, a mask that is not key padding (and a window) decides alone
    k_ent, v_ent = key, value
    T = query.shape[2]
    if causal and attention_mask is None and 1 < T < key.shape[2]:
        k_ent, v_ent = key[:, :, :T], value[:, :, :T]  # as sdpa: a prefill into an empty static cache
    ent_args = {"causal": causal, "mask": mask, "window": window, **extras}
    backend = backend_for("auto" if session is None else session.impl, query, k_ent, **ent_args)

    def streamed():  # output, entropy and sink mass from the same score tiles, plain torch
        out, ent, mass = attention_with_entropy_torch(query.detach(), k_ent, v_ent, lam, **ent_args)
        return (out, None), ent, mass

    def separate():  # sdpa's output, then an entropy-only pass over the same q, k (no extras here)
        out = _sdpa(module, q_out, key, value, attention_mask, dropout, out_scaling, kwargs)
        return (
            out,
            attention_entropy(query.detach(), k_ent.detach(), scale=lam, impl=backend, **ent_args),
            None,
        )

    def fused():  # the Triton kernel's output + entropy pass
        from entropy_lens.kernels.triton_entropy import attention_with_entropy_triton

        scale = torch.as_tensor(lam, dtype=torch.float32, device=query.device).expand(query.shape[1])
        o, ent, mass = attention_with_entropy_triton(
            query, k_ent, v_ent, scale, causal, mask, window, softcap, sinks, return_sink_mass=True
        )
        return (o.transpose(1, 2).contiguous(), None), ent, mass

    run = {
        "separate": streamed if has_extras else separate,
        "fused": fused if backend == "triton" else streamed,
    }
    path = "separate"
    if (
        capturing
        and session.fused != "off"
        and run["fused"] is not run["separate"]
        and fused_applies(backend, query, key, value, mask, dropout)
    ):
        shapes = (*query.shape, *key.shape[1:3])
        shape_key = (str(query.device), query.dtype, *shapes, mask is not None, causal, window, has_extras)
        path, (out, ent, mass) = (session.choices or PROCESS_CHOICES).choose(session.fused, shape_key, run)
    else:
        out, ent, mass = run[path]()
    if not capturing:
        return out
    ran_streamed = run[path] is streamed
    session.paths.add("streamed" if ran_streamed and path == "separate" else path)
    session.backends.add("torch_chunked" if ran_streamed else backend)
    offset = k_ent.shape[2] - T
    if sinks is None:
        session.on_entropy(module.layer_idx, ent, offset)
    else:
        session.on_entropy(module.layer_idx, ent, offset, mass)
    return out


def _row_multipliers(schedule: Schedule, position_ids, query, key):
    """(B|1, 1, T, 1) multipliers m(i) in query's dtype: positions from `position_ids` when the model
    passes them, else the last T of the S key positions (a prefill from 0, or decoding on a cache)."""
    T, S = query.shape[2], key.shape[2]
    if position_ids is None:
        position_ids = torch.arange(S - T, S, device=query.device).unsqueeze(0)
    m = schedule.multiplier(position_ids.to(query.device))
    return m.view(m.shape[0], 1, T, 1).to(query.dtype)


def _sdpa(module, query, key, value, attention_mask, dropout, scaling, kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def _eager(module):
    """The model's own eager attention function (each modeling file defines `eager_attention_forward`)."""
    import sys

    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise EntropyLensError(
            f"{type(module).__name__} has no eager attention function to train scales through its "
            "softcap or sinks; run without gradients (the exact streaming path), or report the architecture"
        )
    return fn


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
