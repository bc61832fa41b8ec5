"""The interactive explorer: results files, sweeps and monitor histories as one self-contained HTML page
(plotly.js inlined), for a browser (`entropy-lens view RESULT ... --out report.html`) or inline in Jupyter
(`view(...)`).

    from entropy_lens.view import view
    view([("NoPE", nope), ("RoPE", rope)])       # a notebook cell shows it; .save("report.html") writes it

Modules: `sources.py` (what the user names -> results, sweeps and histories), `reduce.py` (long curves
to binned mean with a min–max envelope), `payload.py` (the numbers the page draws; a history's:
`histories.py`; attention received by key position: `received.py`; all written by `encode.py`),
`page.py` (the HTML), `explorer.js` (the page's script: heat map, click a head, difference, attention
received, sweep, history); a generation's numbers: `generations.py`, drawn by `generation.js`.
"""

from importlib import import_module

__all__ = ["View", "view"]


def __getattr__(name):  # lazy: `entropy-lens --help` reads view.config without scipy, pandas, plotly
    if name in __all__:
        return getattr(import_module("entropy_lens.view.page"), name)
    raise AttributeError(f"module 'entropy_lens.view' has no attribute {name!r}")
