"""Rendering the paper's figures from the runs' results: Figures 1–5, 7 and 10–14, Table 2 and a README
with the headline numbers (`entropy_lens.figures.render.render`). The runs themselves (scans, sweep, head-scale search and their
cache) live in `entropy_lens.runs.figures`; this package only draws and writes.

    config.py       FiguresConfig: the figures' settings (`--config` YAML keys), `paper.yaml` the paper's

Names are imported lazily, so `entropy_lens.figures.config` loads neither matplotlib nor pandas.
"""

from importlib import import_module

_LAZY = {"FiguresConfig": "config"}

__all__ = ["FIGURES", "TABLES", "FiguresConfig"]

FIGURES = ("01", "02", "03", "04", "05", "07", "10", "11", "12", "13", "14")
TABLES = ("02",)  # the paper's tables this package draws: table-NN.png/.pdf and a README section


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f"entropy_lens.figures.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'entropy_lens.figures' has no attribute {name!r}")
