"""Monitor: attention statistics inside a training loop, per step. ::

    with AttentionMonitor(model, stats=("entropy",), every=10) as mon:   # monitor.py
        ...                                  # any training loop: every 10th forward of `model` records
    mon.latest()      # {stat: (layers, heads) float32} of the last recorded step (records.py)
    mon.scalars()     # {"attention/entropy/layer_0/mean": ..., ...} for any logger
    mon.save(path)    # the history, a versioned .npz (history.py); load_history(path) reads it back

`EntropyLensCallback` (callback.py) does the same inside `transformers.Trainer`; `qk_clip` (clip.py)
is MuonClip's QK-clip from the monitor's max logits. The package sits above capture/ (whose recorder
machinery measures the recorded forwards); training/ (train-tiny, search-heads) watches its own steps
with it. Its names load on first use: `settings.py` (MonitorSettings, --monitor's checks) without torch,
so the command line's flags load none, and transformers only with the callback.
"""

from importlib import import_module

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

_LAZY = {
    "MONITOR_STATS": "entropy_lens.monitor.settings",
    "AttentionMonitor": "entropy_lens.monitor.monitor",
    "AttentionThresholdWarning": "entropy_lens.monitor.thresholds",
    "EntropyLensCallback": "entropy_lens.monitor.callback",
    "History": "entropy_lens.monitor.history",
    "Thresholds": "entropy_lens.monitor.thresholds",
    "load_history": "entropy_lens.monitor.history",
    "qk_clip": "entropy_lens.monitor.clip",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'entropy_lens.monitor' has no attribute {name!r}")
