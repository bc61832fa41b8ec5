"""How AttentionMonitor sits on a model: what it refuses before it installs anything, its hooks (inert in
a copy of the model), whether a forward is still under way, and a recorded forward's reports fed to its
sums.

    check_model(model)             # EntropyLensError in one line: not a transformers model with attention
    refuse_nesting(active_session())   # one capture per forward
    model.register_forward_pre_hook(Hook(fn), ...)   # a deep copy or pickle of the model gets a no-op
    outer_forward_running(model)   # a nested call, or the state of a forward Ctrl-C ended
    RecordedForward(session, sums)   # a recorded forward's reports fed to its sums too, until close()
"""

from __future__ import annotations

import sys

import torch

from entropy_lens.capture.reports import fan_out
from entropy_lens.errors import EntropyLensError

_CALL_IMPL = torch.nn.Module._call_impl.__code__  # the frame of a module call, under its hooks


class Hook:
    """A monitor's hook on the model: a deep copy (or pickle) of the model gets a hook that does nothing,
    so a copy of a monitored model carries no hidden monitor that `close()` could never remove."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def __deepcopy__(self, memo):
        return _inert

    def __reduce__(self):
        return _inert_hook, ()


def _inert(*args):
    return None


def _inert_hook():
    return _inert


def outer_forward_running(model) -> bool:
    """Whether, inside a forward pre-hook of `model`, another forward of `model` is under way below this
    one (a nested call), rather than one that ended without its forward hooks (torch calls even
    `always_call` hooks for an `Exception` only, not for a KeyboardInterrupt): the model's module-call
    frames on the stack."""
    frame, calls = sys._getframe(1), 0
    while frame is not None:
        if frame.f_code is _CALL_IMPL and frame.f_locals.get("self") is model:
            calls += 1
        frame = frame.f_back
    return calls > 1


def check_model(model) -> None:
    """EntropyLensError in one line, before anything else, for what is not a transformers model with
    softmax attention layers (None, a bare module, Mamba)."""
    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or not hasattr(config, "get_text_config"):
        raise EntropyLensError(
            f"AttentionMonitor watches a transformers model (a PreTrainedModel with a config); got "
            f"{type(model).__name__}: pass the model itself, e.g. AttentionMonitor(model)"
        )
    if not getattr(config.get_text_config(), "num_attention_heads", None):
        raise EntropyLensError(
            f"{type(model).__name__} has no softmax attention layers (its config declares no "
            "num_attention_heads), so AttentionMonitor has nothing to watch. See README, Supported architectures"
        )


def refuse_nesting(session) -> None:
    """One capture per forward: EntropyLensError where an EntropyRecorder or ScaleSession is active (its
    session would hand the monitor's layers none of their statistics, or take the recorder's)."""
    if session is not None:
        raise EntropyLensError(
            "an EntropyRecorder or ScaleSession is active around this AttentionMonitor's forward; one capture "
            "runs per forward: record through it with `with mon.recording(session): model(...)` "
            "(session = that recorder or ScaleSession), or close one of the two"
        )


class RecordedForward:
    """One recorded forward: `session`'s reports (row statistics, non-finite layers, key statistics) fed
    to `sums` (a summary.ForwardSums), after the session's own consumer where it has one (an
    EntropyRecorder's reports go on: capture/reports.py's `fan_out`), until `close`."""

    def __init__(self, session, sums):
        self.session, self.sums = session, sums
        self.own = session.reports
        session.reports = fan_out(self.own, sums)

    def close(self) -> None:
        """The session's own consumer again, and no mask of this forward kept alive."""
        self.session.reports = self.own
        self.session.mask_memo.clear()


def activation_checkpointing(model) -> bool:
    """Whether `model` recomputes its layers in the backward (transformers' activation checkpointing, named
    `is_activation_checkpointing` from v5 and `is_gradient_checkpointing` before)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False
