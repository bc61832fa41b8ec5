"""entropy_lens: per-layer, per-head, per-position attention entropy of causal LMs.

Imports run one way: each package imports only from the floors after its own (tests/test_layout.py's
ALLOWED says which), `__main__` → `cli` → `figures` → `harness`, `training` → `runs`, `monitor`,
`plotting`, `view` → `kvpress`, `capture`, `analysis` → `models`, `data`, `kernels`, `results`,
`progress`; and any of them from `errors`, `flags`, `settings`, `statistics` (torch-free).

Heavy imports (torch, transformers) are deferred until a name that needs them is used.
"""

from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "EntropyLensError": "entropy_lens.errors",
    "attention_entropy": "entropy_lens.kernels",
    "attention_stats": "entropy_lens.kernels",
    "attention_received": "entropy_lens.kernels",
    "EntropyRecorder": "entropy_lens.capture",
    "AttentionMonitor": "entropy_lens.monitor",
    "EntropyLensCallback": "entropy_lens.monitor.callback",
    "ScanConfig": "entropy_lens.runs.scan",
    "scan": "entropy_lens.runs.scan",
    "PasskeyConfig": "entropy_lens.runs.configs",
    "passkey": "entropy_lens.runs.passkey",
    "ScanResult": "entropy_lens.results",
    "summary": "entropy_lens.results",
    "load_model": "entropy_lens.models",
}

__all__ = [  # noqa: RUF022 (same order as _LAZY)
    "__version__",
    "EntropyLensError",
    "attention_entropy",
    "attention_stats",
    "attention_received",
    "EntropyRecorder",
    "AttentionMonitor",
    "EntropyLensCallback",
    "ScanConfig",
    "scan",
    "PasskeyConfig",
    "passkey",
    "ScanResult",
    "summary",
    "load_model",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'entropy_lens' has no attribute {name!r}")
