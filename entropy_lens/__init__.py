"""entropy_lens: per-layer, per-head, per-position attention entropy of causal LMs.

Where to start: `scan(ScanConfig(...))` measures a model on a text into a `ScanResult` (a results file
that `ScanResult.load` opens); `EntropyRecorder` records your own forward passes, `GenerationRecorder` every token `generate()` writes; `attention_stats` and
`attention_received` are the kernels alone, on queries and keys; `AttentionMonitor` (or
`EntropyLensCallback` for a `transformers.Trainer`) watches a training loop; `load_model` loads a
checkpoint as the others do. Each is importable from `entropy_lens`, and heavy imports (torch,
transformers) wait until a name that needs them is used.

How the package is layered, for contributors: docs/internals/layout.md.
"""

from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "EntropyLensError": "entropy_lens.errors",
    "attention_entropy": "entropy_lens.kernels",
    "attention_stats": "entropy_lens.kernels",
    "attention_received": "entropy_lens.kernels",
    "attention_probs": "entropy_lens.kernels",
    "row_slice_stats": "entropy_lens.kernels",
    "EntropyRecorder": "entropy_lens.capture",
    "GenerationRecorder": "entropy_lens.generation",
    "GenerationResult": "entropy_lens.generation",
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
    "attention_probs",
    "row_slice_stats",
    "EntropyRecorder",
    "GenerationRecorder",
    "GenerationResult",
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
