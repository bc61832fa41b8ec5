"""Monitor: attention statistics inside a training loop, per step.

    with AttentionMonitor(model, stats=("entropy",), every=10) as mon:   # monitor.py
        ...                                  # any training loop: every 10th forward of `model` records
    mon.latest()      # {stat: (layers, heads) float32} of the last recorded step
    mon.scalars()     # {"attention/entropy/layer_0/mean": ..., ...} for any logger
    mon.save(path)    # the history, a versioned .npz (history.py); load_history(path) reads it back

`EntropyLensCallback` (callback.py) does the same inside `transformers.Trainer`; `qk_clip` (clip.py)
is MuonClip's QK-clip from the monitor's max logits. The package sits above capture/ (whose recorder
machinery measures the recorded forwards) and beside runs/; transformers is imported only by the
callback's module, on first use.
"""

from importlib import import_module

from entropy_lens.monitor.history import History, load_history
from entropy_lens.monitor.monitor import AttentionMonitor
from entropy_lens.monitor.summary import MONITOR_STATS
from entropy_lens.monitor.thresholds import AttentionThresholdWarning, Thresholds

__all__ = [
    "MONITOR_STATS",
    "AttentionMonitor",
    "AttentionThresholdWarning",
    "EntropyLensCallback",
    "History",
    "Thresholds",
    "load_history",
    "qk_clip",
]

_LAZY = {"EntropyLensCallback": "entropy_lens.monitor.callback", "qk_clip": "entropy_lens.monitor.clip"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'entropy_lens.monitor' has no attribute {name!r}")
