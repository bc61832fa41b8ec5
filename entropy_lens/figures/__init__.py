"""The paper's pipeline: the runs behind its figures and tables (the registry lists them), their cache,
and the drawing, with a README of the headline numbers. This package is the code; the root folder
`figures/` is its data: the committed runs (`figures/runs/`), the figures drawn from them and their
README (`figures/README.md`, written by readme.py). It sits above the run code (`entropy_lens.runs`,
which imports nothing from here): `pipeline.py` asks the runs for each scan, sweep and head-scale search
when the lazy record `FigureData` first reads it, so one figure drawn alone resolves only its own runs.

    config.py       FiguresConfig: the figures' settings (`--config` YAML keys); paper.yaml the paper's
    pipeline.py     figure_data, make_figures: the runs behind the figures (Runs), drawn all or by name
    cache.py        RunCache: every run cached under a hash of its cache key, noted as it is resolved
    record.py       FigureData: the runs' results, typed, each field resolved on first read
    registry.py     @figure("figure-NN", differences=...): every figure and table, in the README's order
    curves.py       entropy and loss by position: Figures 1, 2, 4
    heads.py        per-head entropy: Figures 3, 5, 10–12
    scales.py       the best uniform scale by position and its log fit: Figure 7
    losses.py       loss of scaled variants against their baselines: Figures 13, 14, 15
    passkey.py      passkey retrieval: Figures 6, 8, 9 and 16 (accuracy beside the needle's attention)
    beyond.py       the row statistics beyond entropy past L, against the papers that use them: Figure 17
    tables.py       Table 2, sliding-window perplexity
    training.py     the training watched (the monitor's histories, the λ(h) search): Figure 18
    watching.py     Figure 18's runs: train-tiny's pretraining and the λ(h) search, rerun with the monitor
    landing.py      where NoPE's attention goes beyond L, by key position (attention received): Figure 19
    words.py        phrases several captions share (spans, s*'s rule, how λ(h) were made)
    differences.py  the differences every figure shares, and any one figure's (from the registry)
    readme.py       the README writer (whole, or one item's section spliced into it)
    render.py       render(data, config, out): every item's PNG and PDF (or the named ones'), then the README

Adding a figure is one decorated function in the module of its kind, reading from `data` what it draws
(a run the record lacks: one field in record.py, and a Runs method in pipeline.py for a new kind of run;
the numbers behind it: pure functions in `entropy_lens.analysis`). Colours and line styles come from
`entropy_lens.plotting` (its `style.py`). Names are imported lazily, so `entropy_lens.figures.config`
loads neither matplotlib nor pandas; `render` is `entropy_lens.figures.render.render`.
"""

from importlib import import_module

_LAZY = {
    "FiguresConfig": "config",
    "FigureData": "record",
    "figure": "registry",
    "items": "registry",
    "figure_data": "pipeline",
    "make_figures": "pipeline",
}

__all__ = [
    "FIGURES",
    "TABLES",
    "FigureData",
    "FiguresConfig",
    "figure",
    "figure_data",
    "items",
    "make_figures",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f"entropy_lens.figures.{_LAZY[name]}"), name)
    if name in ("FIGURES", "TABLES"):  # the numbers of the registered figures / tables: ("01", "02", ...)
        from entropy_lens.figures.registry import items

        kind = name[:-1].lower()
        return tuple(i.number for i in items() if i.kind == kind)
    raise AttributeError(f"module 'entropy_lens.figures' has no attribute {name!r}")
