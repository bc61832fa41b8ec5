"""Everything that loads a model and runs it: the one layer that spans the pipeline.

    scan.py         scan(config) -> ScanResult: config -> device/dtype -> model -> data -> loop -> file
    output.py       the results file's policy: --out, --resume, --force (OutputSettings, with --quiet),
                    the `.partial.npz` checkpoint
    sums.py         ScanSums: the scan's float64 running sums, checkpointed and all-reduced
    distributed.py  torchrun: ranks, process group, all-reduce of those sums
    sweep.py        one scan per uniform scale, into a folder with a sweep index
    configs.py      ScanConfig, PerplexityConfig, PasskeyConfig, HeadSearchConfig: every run setting
                    declared once (no torch)
    threads.py      --threads: the CPU thread count, set once before a command loads torch
    perplexity.py   sliding-window perplexity (the paper's Table 2): one loss-only scan per window length
    passkey.py      passkey retrieval (Figures 6, 8, 9) with the answer rows' entropy and needle mass

It may import every package below it (models, capture, kernels, data, results, analysis); nothing below
imports it. Above it sit `figures/` (the paper's pipeline: the runs behind its figures, their cache and
the drawing), `training/` (train-tiny, whose model cards are made of these runs, and the λ(h) search:
every loop that trains, its checkpoints and histories) and `cli/`, a thin
layer over these functions. Names are imported lazily, so `from entropy_lens.runs import ScanConfig`
does not load torch. The
functions `scan`, `sweep` and `passkey` share their modules' names: import them from `entropy_lens` (or
`entropy_lens.runs.scan` / `.sweep` / `.passkey`).
"""

from importlib import import_module

_LAZY = {
    "ScanConfig": "configs",
    "ScanSums": "sums",
    "parse_scales": "sweep",
    "HeadSearchConfig": "configs",
    "PerplexityConfig": "configs",
    "PasskeyConfig": "configs",
}

__all__ = [
    "HeadSearchConfig",
    "PasskeyConfig",
    "PerplexityConfig",
    "ScanConfig",
    "ScanSums",
    "parse_scales",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f"entropy_lens.runs.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'entropy_lens.runs' has no attribute {name!r}")
