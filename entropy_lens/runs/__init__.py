"""Everything that loads a model and runs it: the one layer that spans the pipeline.

    scan.py         scan(config) -> ScanResult: config -> device/dtype -> model -> data -> loop -> file
    output.py       the results file's policy: --out, --resume, --force (OutputSettings, with --quiet),
                    the `.partial.npz` checkpoint
    sums.py         ScanSums: the scan's float64 running sums, checkpointed and all-reduced
    distributed.py  torchrun: ranks, process group, all-reduce of those sums
    sweep.py        one scan per uniform scale, into a folder with a sweep index
    configs.py      ScanConfig, PerplexityConfig, PasskeyConfig, HeadSearchConfig: every run setting
                    declared once (no torch)
    head_search.py  the per-head λ(h) search (every weight frozen)
    threads.py      --threads: the CPU thread count, set once before a command loads torch
    training_record.py  a train-tiny model's training.json read (its steps); training/ writes it
    perplexity.py   sliding-window perplexity (the paper's Table 2): one loss-only scan per window length
    passkey.py      passkey retrieval (Figures 6, 8, 9) with the answer rows' entropy and needle mass
    figures.py      the scans, sweep and search behind the paper's figures (cached: figure_cache.py); then rendering
                    (their settings, FiguresConfig, live in figures/config.py, re-exported here)

It may import every package below it (models, capture, kernels, data, results, analysis and, for the
figures, figures.config, .record and .render); nothing below imports it. Above it sit `training/`
(train-tiny, whose model cards are made of these runs) and `cli/`, a thin layer over these functions.
Names are imported lazily, so `from entropy_lens.runs import FiguresConfig` does not load torch. The
functions `scan`, `sweep` and `passkey` share their modules' names: import them from `entropy_lens` (or
`entropy_lens.runs.scan` / `.sweep` / `.passkey`).
"""

from importlib import import_module

_LAZY = {
    "ScanConfig": "configs",
    "ScanSums": "sums",
    "parse_scales": "sweep",
    "HeadSearchConfig": "configs",
    "search_head_scales": "head_search",
    "save_head_scales": "head_search",
    "PerplexityConfig": "configs",
    "PasskeyConfig": "configs",
    "FiguresConfig": "figures",
    "figure_data": "figures",
    "make_figures": "figures",
}

__all__ = [
    "FiguresConfig",
    "HeadSearchConfig",
    "PasskeyConfig",
    "PerplexityConfig",
    "ScanConfig",
    "ScanSums",
    "figure_data",
    "make_figures",
    "parse_scales",
    "save_head_scales",
    "search_head_scales",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f"entropy_lens.runs.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'entropy_lens.runs' has no attribute {name!r}")
