"""`AttentionMonitor`: per-head attention statistics of a model's forwards, inside any training loop.

    with AttentionMonitor(model, stats=("entropy",), every=10) as mon:
        for step, batch in enumerate(batches, 1):
            mon.step = step                   # optional: else each forward is a step of its own
            model(**batch).loss.backward(); opt.step(); opt.zero_grad()
            logger.log(mon.scalars(), step)   # once a step has been recorded
    mon.latest()["entropy"]                   # (layers, heads) float32, the last recorded step
    mon.save("attention.npz")                 # history.py

Which forwards record: forward n (1, 2, ... counted while the monitor is active and `enabled`) belongs
to step n, or to the step the loop set (`mon.step = s`); it records when its step is a multiple of
`every`. The forwards of one step (gradient accumulation's micro-batches) are merged into one record:
means over all their real rows, maxima over all.

How: a forward pre-hook on `model` decides. A recorded forward enters a `capture.ScaleSession` for its
duration (the entropy_lens attention installed, its session's reports feeding summary.ForwardSums)
and leaves it in a forward hook that runs even when the forward raises; every other forward runs the
model's own attention implementation, untouched. The statistics come from whatever route capture takes
(its gradients are the model's: capture/paths.py); the 2-D `attention_mask` the model is given says
which query rows are real (a 4-D mask, or none: all rows count, as the recorder counts them). With
`received`, the attention each key receives (capture/received.py, no gradients), is read off the column
state the session hands it.

Under real training:
- autocast: the recorded forwards run the attention in autocast's dtype, as sdpa does (kernels/train.py);
- an exception in a recorded forward (Ctrl-C, a caught error) leaves nothing installed: the forward hook
  restores the model's attention for an `Exception`, and for what torch does not call it on (a
  KeyboardInterrupt) the next forward finds the dead one's state and restores it before it runs;
- a step whose attention is not finite (NaN/inf weights, a bf16 overflow) is recorded as such, not
  refused: its layers run the model's own attention (NaN and all), `nonfinite_steps` and
  `scalars()["attention/nonfinite"]` say so, a NonFiniteStepWarning names the first layer and step
  once, and the loop decides (GradScaler skips the step);
- `output_attentions=True` on an eager model returns eager's weights; one capture per forward: a monitor
  refuses to nest with a recorder or ScaleSession of the model (use `recording(session)`).

This module decides which forwards record and installs what records them: the monitor's own session
entered for a recorded forward (its hooks), or the caller's (`recording()`), both through one path
(`_open`, `_close`: a forward counted, its reports fed to a summary.ForwardSums, the summary added).
The records and what is read of them (`latest`, `scalars`, `history`) are records.py's.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref

from entropy_lens import __version__
from entropy_lens.capture import ScaleSession, check_supported
from entropy_lens.capture.call import active_session
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Fused
from entropy_lens.monitor.applies import check_applies, tower_hooks
from entropy_lens.monitor.install import (
    Hook,
    RecordedForward,
    activation_checkpointing,
    check_model,
    outer_forward_running,
    refuse_nesting,
)
from entropy_lens.monitor.records import MonitorRecords
from entropy_lens.monitor.settings import (
    MONITOR_STATS,
    check_monitor_stats,
    expanded,
    session_stats,
    summaries,
)
from entropy_lens.monitor.summary import ForwardSums
from entropy_lens.settings import check_argument
from entropy_lens.statistics import reduction_of

_MONITORED = weakref.WeakSet()  # models with an active monitor: one at a time


class AttentionMonitor(MonitorRecords):
    """Record per-head attention statistics of every `every`-th step's forwards of `model` (see the
    module docstring). A context manager: entering installs its hooks, leaving (or `close`) removes them.

    Args:
        model: a transformers causal LM that capture supports (refused on entry otherwise).
        stats: distinct names of row statistics (entropy_lens.statistics.STATISTICS; a name or a tuple),
            each summarised per head by its reduction (the mean over real query rows, the maximum for
            maxima), and "received": per head `received_first`, the first real key's share of the
            attention (a sink forming; the mean over batch rows), and `received_max_later`, the largest
            received_mean of a later key (a heavy hitter; the max; NaN with none). Default: MONITOR_STATS.
        every: record the forwards of steps that are multiples of `every` (>= 1).
        fused: the recorded forwards' route, one of kernels.FUSED_MODES (capture.ScaleSession's
            `fused`): "off" keeps the model's own sdpa output and gradients bit for bit (the statistics
            in a pass of their own); "auto" may train through the one-pass kernel (kernels/train.py),
            equal to sdpa only to rounding.
        **params: the statistics' parameters by name (entropy_lens.statistics.PARAMETERS).

    Raises:
        EntropyLensError: an unknown or repeated statistic, every < 1, a flag out of range, or a
            statistic or layer that no recorded forward of this model could measure.
    """

    def __init__(
        self,
        model,
        *,
        stats=MONITOR_STATS,
        every: int = 1,
        fused: str = "auto",
        **params,
    ):
        super().__init__()  # the records (records.py)
        check_model(model)
        self.stats = check_monitor_stats(stats)
        check_argument("every", every, int, {"at_least": 1}, example=1)
        self.every, self.model = int(every), model
        self._scaling = ScaleSession(model, stats=session_stats(self.stats), fused=fused, **params)
        self.measure = self._scaling.session.measure  # what to measure, parsed once by the ScaleSession
        self.reported = expanded(self.stats, self.measure.slices)  # row-slice statistics as their arrays
        self.summaries = summaries(self.reported)  # the names of latest()'s and the history's arrays
        cfg = model.config.get_text_config()
        self.n_layers, self.n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
        self.n_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        # a statistic or a layer no recorded forward could measure: refused now, not at step `every`
        check_applies(model, self.reported, measure=self.measure, n_layers=self.n_layers)
        params = list(inspect.signature(model.forward).parameters)
        self._mask_index = params.index("attention_mask") if "attention_mask" in params else None
        self.enabled = True  # while False, forwards neither record nor count
        self.forwards = 0  # forwards seen while active and enabled
        self._step: int | None = None  # the step the loop set; None: each forward is its own step
        self._forward: RecordedForward | None = None  # the recorded forward under way, through the hooks
        self._through: ScaleSession | None = None  # the caller's session of `recording()`, while in it
        self._depth = 0  # nested calls of the model (the outermost one is the forward)
        self._hooks = []

    # -- installing ---------------------------------------------------------------------------------
    def __enter__(self):
        if self._hooks:
            raise EntropyLensError("this AttentionMonitor is already active; enter it once")
        if self.model in _MONITORED:
            raise EntropyLensError(
                f"{type(self.model).__name__} already has an active AttentionMonitor; close it first "
                "(one monitor per model)"
            )
        check_supported(self.model)  # a model capture cannot measure is refused before training starts
        refuse_nesting(active_session())
        _MONITORED.add(self.model)
        self._hooks = [
            self.model.register_forward_pre_hook(Hook(self._begin), with_kwargs=True, prepend=True),
            self.model.register_forward_hook(Hook(self._end), always_call=True),
            *tower_hooks(self.model, lambda: self.enabled),  # an image: refused at once, whatever `every`
        ]
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Remove the hooks (and a recorded forward's installation, should one be open); the records stay."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._restore()
        _MONITORED.discard(self.model)

    def _restore(self, *, finished: bool = False) -> None:
        """Leave a recorded forward's installation (the model's own attention again) and its state; its
        summary is added where the forward `finished`, else dropped."""
        self._depth = 0
        forward, self._forward = self._forward, None
        if forward is not None:
            self._scaling.__exit__(None, None, None)
            self._close(forward, finished=finished)
        self._scaling.session.mask_memo.clear()  # no mask of this forward is kept alive

    @property
    def active(self) -> bool:
        """Whether the monitor's hooks are installed (inside its `with` block)."""
        return bool(self._hooks)

    @property
    def paths(self) -> set[str]:
        """The attention routes of the recorded forwards, as a scan's meta names them (capture/paths.py)."""
        return set(self._scaling.session.paths)

    # -- steps --------------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The step of the current (or last) forward, the one the loop set, else the forward count."""
        return self.forwards if self._step is None else self._step

    @step.setter
    def step(self, value: int) -> None:
        """Set the step of the forwards that follow (a training loop's optimiser step, >= 0)."""
        check_argument("step", value, int, {"at_least": 0}, example=1)
        self._step = int(value)

    def _begin(self, module, args, kwargs):
        if self._depth and not outer_forward_running(self.model):
            self._restore()  # a forward that a BaseException (Ctrl-C) ended: torch ran no forward hook
        self._depth += 1
        if self._depth > 1 or not self.enabled or self._through is not None:
            return
        refuse_nesting(active_session())
        mask = kwargs.get("attention_mask")
        if mask is None and self._mask_index is not None and len(args) > self._mask_index:
            mask = args[self._mask_index]
        forward = self._open(self._scaling.session, mask)
        if forward is None:
            return
        # activation checkpointing recomputes each layer in the backward, outside this forward, with the
        # model's own attention, whose saved tensors must be the forward's: the statistics then come from
        # a pass beside the model's own sdpa output ("sdpa-then-entropy"), not the one fused pass
        fused = Fused.OFF if activation_checkpointing(self.model) else self.measure.fused
        self._scaling.session.measure = self.measure.replace(fused=fused)
        try:
            self._scaling.__enter__()
        except BaseException:
            forward.close()
            raise
        self._forward = forward  # entered: the forward hook leaves it

    def _end(self, module, args, output):
        self._depth = max(self._depth - 1, 0)
        if self._depth or self._forward is None:
            return
        # the model's own attention again, before any check; a forward that raised (output None) drops
        # its partial reports
        self._restore(finished=output is not None)

    def _open(self, session, mask) -> RecordedForward | None:
        """Count a forward; on a step of `every`, feed its reports to `session` into a new ForwardSums
        (`mask`: the forward's attention_mask; a 2-D one says which rows are real). The one path of both
        the monitor's own installation and `recording()`."""
        self.forwards += 1
        if self.step % self.every:
            return None
        mask = mask if getattr(mask, "ndim", None) == 2 else None
        sums = ForwardSums(self.n_layers, self.reported, mask, model=type(self.model).__name__)
        return RecordedForward(session, sums)

    def _close(self, forward: RecordedForward, *, finished: bool) -> None:
        """The session's own reports again; a `finished` forward's summary added to its step's record."""
        forward.close()
        if finished:
            self._add(forward.sums.finish(self.step))

    @contextlib.contextmanager
    def recording(self, scaling: ScaleSession, attention_mask=None):
        """Count (and record, on a step of `every`) the forward run inside the block through `scaling`, the
        caller's own entered ScaleSession of this model (trainable scales, a schedule), instead of the
        monitor's installation, which would replace it (the innermost session is the one the attention
        follows). For a loop that holds such a session or calls the model's decoder; the monitor need not
        be entered. `scaling` must record the monitor's stats (ScaleSession(stats=session_stats(mon.stats)),
        monitor.settings); an EntropyRecorder's own records go on as well.

        Args:
            scaling: the caller's entered ScaleSession of this model, recording at least `stats`.
            attention_mask: the forward's 2-D padding mask (B, T) (1 = real token), or None: every row
                is real.

        Raises:
            EntropyLensError: `scaling` does not record every statistic of the monitor's `stats`.
        """
        needed = session_stats(self.stats)
        theirs = scaling.session.measure
        lacking = [s for s in needed if s not in (*theirs.stats, *theirs.key_stats, *theirs.slices.stats)]
        if theirs.slices != self.measure.slices:
            lacking += [f"{name} with {self.measure.slices.recorded()}" for name in self.measure.slices.stats]
        if lacking:
            raise EntropyLensError(
                f"the ScaleSession given to recording() does not record {', '.join(lacking)}; make it with "
                f"ScaleSession(model, stats={needed!r}, ...)"
            )
        if not self.enabled:
            yield
            return
        forward = self._open(scaling.session, attention_mask)
        if forward is None:
            yield
            return
        self._through = scaling
        finished = False
        try:
            yield
            finished = True
        finally:  # a raising forward's partial reports are dropped with it
            self._through = None
            self._close(forward, finished=finished)

    def meta(self) -> dict:
        """What a saved history records of the run: the versions and the model's shape."""
        config = self.model.config
        return {
            "entropy_lens_version": __version__,
            "model": str(getattr(config, "_name_or_path", "") or type(self.model).__name__),
            "model_class": type(self.model).__name__,
            "model_type": getattr(config, "model_type", None),
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "stats": list(self.summaries),
            "reductions": {s: reduction_of(s).name for s in self.summaries},
            "every": self.every,
            **self.measure.recorded(),  # the statistics' parameters (statistics.PARAMETERS)
            "step_unit": "forward" if self._step is None else "step",
        }
