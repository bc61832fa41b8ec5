"""`ScaleSession`: attention-scale multipliers applied inside a model's attention, without recording (for
loss-only passes and the head-scale search, where the multipliers may be a trainable tensor); the
recorder (recorder.py) is one that records as well.

    with ScaleSession(model, scales=1.2) as scaling:
        loss = model(input_ids, labels=input_ids).loss
    scaling.session.paths   # what computed the layers (capture/paths.py)

On entry it registers the `entropy_lens` attention implementation, switches the model to it (or, for
BLOOM, MPT and Falcon, routes their layers' own forwards through it: capture/own_attention.py) and
activates the session the attention function follows (capture/attention.py); on exit, exceptions
included, it undoes all of it, in reverse order. What to measure is parsed here, once, into one
`flags.Measure`; the scales are checked here (`as_scales`), and a keyword it does not take is refused
by name (`check_keywords`).
"""

from __future__ import annotations

import contextlib
import difflib
import inspect

import numpy as np
import torch

from entropy_lens.capture.attention import ATTN_NAME, register
from entropy_lens.capture.call import Session, activate
from entropy_lens.capture.own_attention import check_supported, refuse_switch, routed_attention, routes
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure, parse_stats, split_slices
from entropy_lens.settings import SCALE, check_argument
from entropy_lens.statistics import DEFAULT_STATS, PARAMETERS, SLICE_PARAMETERS


class ScaleSession:
    """Apply attention-scale multipliers m_h (λ_h = m_h/√d) inside the model's attention.

    Its keywords are documented where users meet them, in EntropyRecorder's Keyword Args. `session.paths`
    tells afterwards what computed the layers (capture/paths.py's names: "sdpa" where nothing is
    captured) and `session.backends` which entropy kernels ran.
    """

    def __init__(
        self,
        model,
        *,
        scales=None,
        backend=None,
        fused=None,
        schedule=None,
        choices=None,
        stats=None,
        measure: Measure | None = None,
        context=None,
        **params,
    ):
        # the public entrance: what to measure parsed here, once, into one record (flags.Measure), as the
        # CLI's flags are; a scan and the monitor pass theirs parsed (`measure=`), and the layers take it
        loose = {"stats": stats, "backend": backend, "fused": fused, **params}
        if measure is None:
            try:
                others, sliced = split_slices(DEFAULT_STATS if stats is None else stats)
                rows, keys = parse_stats(others or DEFAULT_STATS, None)
                flags = {
                    name: value
                    for name, value in (("backend", backend), ("fused", fused))
                    if value is not None
                }
                measure = Measure.parse(stats=rows, key_stats=keys, slices=sliced, **flags, **params)
            except ValueError as err:
                raise EntropyLensError(str(err)) from None
        elif any(value is not None for value in loose.values()):
            given = ", ".join(name for name, value in loose.items() if value is not None)
            raise TypeError(f"pass {given} inside measure=Measure.parse(...), or leave measure= out")
        self.model = model
        scales = as_scales(model, scales)
        self.session = Session(
            scales=scales, schedule=schedule, measure=measure, choices=choices, context=context
        )
        self._undo = contextlib.ExitStack()

    def __enter__(self):
        with contextlib.ExitStack() as stack:  # a failure part-way undoes what was done
            self._install(stack)
            self._undo = stack.pop_all()
        return self

    def __exit__(self, *exc):
        self._undo.close()
        return False

    def _install(self, stack: contextlib.ExitStack) -> None:
        register()
        check_supported(self.model)
        if routes(self.model):  # BLOOM, MPT, Falcon: their layers' own forwards, routed
            stack.enter_context(routed_attention(self.model))
        else:
            own = self.model.config._attn_implementation
            stack.callback(self.model.set_attn_implementation, own)
            stack.callback(setattr, self.session, "own_attention", self.session.own_attention)
            self.session.own_attention = own
            self.model.set_attn_implementation(ATTN_NAME)
            if self.model.config._attn_implementation != ATTN_NAME:
                refuse_switch(self.model)
        decoder = self.model.get_decoder()
        hooks = (
            decoder.register_forward_pre_hook(self._cache_seen, with_kwargs=True),
            decoder.register_forward_hook(self._cache_done, always_call=True),
        )
        for hook in hooks:
            stack.callback(hook.remove)
        stack.enter_context(activate(self.session))

    def _cache_seen(self, module, args, kwargs):
        self.session.cache_seen = cache_length(kwargs.get("cache", kwargs.get("past_key_values")))

    def _cache_done(self, module, args, output):
        self.session.cache_seen = None


def cache_length(cache) -> int | None:
    """The tokens a transformers KV cache holds (`get_seq_length()`: a StaticCache's is a tensor, read
    once per forward); None without a cache or one that does not say."""
    seen = getattr(cache, "get_seq_length", None)
    return None if seen is None else int(seen())


def check_keywords(name: str, options: dict) -> None:
    """TypeError in one line for a keyword `ScaleSession` does not take, with the close matches
    (`scale=` -> "did you mean scales=?"), naming `name` rather than the internal class."""
    signature = inspect.signature(ScaleSession.__init__).parameters
    known = [p for p in signature if p not in ("self", "model", "params")] + [*PARAMETERS, *SLICE_PARAMETERS]
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}=?" if close else f"use {', '.join(known)}"
            raise TypeError(f"{name}() got an unexpected keyword {key!r}; {hint}")


def as_scales(model, scales):
    """None | float | (layers, heads) -> what `Session.scales` holds; each multiplier a finite number
    above 0, as --scale and --head-scales take (settings.SCALE): EntropyLensError in one line otherwise."""
    if scales is None:
        return None
    if not isinstance(scales, (torch.Tensor, np.ndarray, list, tuple)):
        check_argument("scales", scales, float, SCALE, example=1.0)
        return float(scales)
    param = next(model.parameters())
    t = scales if isinstance(scales, torch.Tensor) else torch.as_tensor(np.asarray(scales, dtype=np.float32))
    values = t.detach()
    bad = ~(torch.isfinite(values) & (values > 0))
    if bool(bad.any()):
        place = [int(i) for i in bad.nonzero()[0]]
        where = ", ".join(f"{dim} {i}" for dim, i in zip(("layer", "head"), place, strict=False))
        value = float(values[tuple(place)])
        raise EntropyLensError(
            f"scales at {where} is {value:g} ({int(bad.sum())} values not finite and above 0 in all); "
            "every multiplier must be a finite number above 0, as --scale and --head-scales take"
        )
    return t.to(param.device)
