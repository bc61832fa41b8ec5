"""`EntropyLensCallback`: the AttentionMonitor inside `transformers.Trainer`.

    trainer = Trainer(model, args, train_dataset=..., callbacks=[EntropyLensCallback(every=10)])
    trainer.train()        # trainer.state.log_history holds "attention/entropy/layer_0/mean", ...

Steps are optimizer steps (`state.global_step`): every micro-batch of a gradient-accumulation step
belongs to the step it makes, so `every` counts optimizer steps and each record merges its step's
micro-batches. Only the training steps' forwards record (from `on_step_begin` to `on_step_end`);
evaluation's forwards run the model's own attention.

The scalars of each new record go into the logs of the first training log at or after it (`on_log`:
one with the training loss; evaluation's logs get none): into `logs`, which the callbacks after this one
see, and into the entry `Trainer.log` has just put in `state.log_history` (it copies `logs` before the
callbacks run). `Trainer.log` calls its callbacks in the order of `trainer.callback_handler.callbacks`,
and `Trainer.__init__` puts the reporters of `report_to` (TensorBoardCallback, WandbCallback, ...) ahead of
the callbacks a user passes; each reporter writes `logs` as it is when called. So for the reporters to see
the scalars the callback must be first, and transformers hands a callback neither the trainer nor its
callback list: `callback.add_to(trainer)` puts it first (adding it where it is not there yet), once the
trainer is made and before `train()`:

    trainer = Trainer(model, args, train_dataset=..., callbacks=[callback])   # report_to=["tensorboard"]
    callback.add_to(trainer)

Without it, where `args.report_to` names reporters, `on_train_begin` warns in one line that they will not
see the scalars (the trainer's `state.log_history` still holds them).

The monitor is installed at `on_train_begin` and removed at `on_train_end`. transformers calls no
callback when train() raises: the forward under way is closed by the monitor's own hook (the model's
attention is its own again), but the monitor's hooks stay on the model, recording should train() have
stopped inside a step, until the next `on_train_begin` or `callback.close()` removes them.
"""

from __future__ import annotations

import warnings

from transformers import TrainerCallback

from entropy_lens.flags import parse_params
from entropy_lens.monitor.monitor import AttentionMonitor
from entropy_lens.monitor.settings import MONITOR_STATS, check_monitor_stats, summaries
from entropy_lens.monitor.thresholds import Thresholds
from entropy_lens.settings import check_argument

TRAINING_LOG_KEYS = frozenset(("loss", "train_loss"))  # what Trainer's training logs (and only they) hold


class EntropyLensCallback(TrainerCallback):
    """Monitor attention during `Trainer.train()`; log the summaries; warn when a head crosses a threshold.

    Args:
        stats: the statistics recorded, as AttentionMonitor's (names of entropy_lens.statistics.STATISTICS,
            and received for its two summaries; default monitor.settings.MONITOR_STATS).
        every: record every `every`-th optimizer step (>= 1).
        thresholds: None or {stat: ("below" | "above", limit)} (thresholds.Thresholds), each stat one of
            the monitor's summaries (a row statistic of `stats`, or received_first or received_max_later
            with received): a warning, once per head, naming the layer, head and step.
        prefix: the logged names' first part, as `AttentionMonitor.scalars`'s.
        per_head: log one scalar per head too, as `AttentionMonitor.scalars`'s.
        **params: the statistics' parameters by name (entropy_lens.statistics.PARAMETERS), checked here.

    Raises:
        EntropyLensError: an unknown or repeated statistic, every < 1, or a malformed threshold.
        TypeError: prefix not a str or per_head not a bool.
    """

    def __init__(
        self,
        *,
        stats=MONITOR_STATS,
        every: int = 1,
        thresholds: dict | None = None,
        prefix: str = "attention",
        per_head: bool = False,
        **params,
    ):
        self.stats = check_monitor_stats(stats)
        check_argument("every", every, int, {"at_least": 1}, example=1)
        if not isinstance(prefix, str) or not isinstance(per_head, bool):
            raise TypeError("EntropyLensCallback(prefix: str, per_head: bool)")
        parse_params(params)  # refused now, not at on_train_begin
        self.every, self.params, self.prefix, self.per_head = int(every), params, prefix, per_head
        self.thresholds = Thresholds(thresholds, stats=summaries(self.stats))
        self.monitor: AttentionMonitor | None = None
        self._logged_step = None  # the step of the last record put into the logs
        self._first = False  # add_to put it ahead of the reporters

    def add_to(self, trainer) -> EntropyLensCallback:
        """Put this callback first among `trainer`'s callbacks, ahead of its `report_to` reporters, so that
        they report its scalars too (call it after making the trainer, before `train()`).

        Args:
            trainer: a transformers.Trainer; the callback is added if it is not among its callbacks, and
                moved to the front if it is (the others keep their order).

        Returns:
            EntropyLensCallback: this callback.
        """
        callbacks = trainer.callback_handler.callbacks
        if self in callbacks:
            callbacks.remove(self)
        callbacks.insert(0, self)
        self._first = True
        return self

    def close(self) -> None:
        """Remove the monitor from the model (the records stay in `self.monitor`)."""
        if self.monitor is not None:
            self.monitor.close()

    # -- Trainer events -----------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.close()  # a monitor an interrupted train() left
        if not self._first and getattr(args, "report_to", None):
            warnings.warn(
                f"EntropyLensCallback: the report_to reporters {list(args.report_to)} are called before it "
                "and will not log its scalars; call callback.add_to(trainer) before trainer.train()",
                stacklevel=2,
            )
        self.monitor = AttentionMonitor(model, stats=self.stats, every=self.every, **self.params)
        self.monitor.__enter__()
        self.monitor.enabled = False
        self._logged_step = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.monitor is not None and self.monitor.active:
            self.monitor.step = state.global_step + 1  # the optimizer step these forwards make
            self.monitor.enabled = True

    def on_step_end(self, args, state, control, **kwargs):
        mon = self.monitor
        if mon is None:
            return
        mon.enabled = False
        if mon.latest_step == state.global_step and mon.latest_finite and self.thresholds.limits:
            self.thresholds.check(mon.latest(), state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        mon = self.monitor
        if mon is None or logs is None or not mon.recorded or mon.latest_step == self._logged_step:
            return
        if not TRAINING_LOG_KEYS.intersection(logs):  # evaluation's metrics: not a training step's
            return
        scalars = mon.scalars(self.prefix, per_head=self.per_head)
        logs.update(scalars)
        last = state.log_history[-1] if state.log_history else None
        if last is not None and last.get("step") == state.global_step and last is not logs:
            last.update(scalars)  # Trainer.log appended a copy of `logs` before calling the callbacks
        self._logged_step = mon.latest_step

    def on_train_end(self, args, state, control, **kwargs):
        self.close()
