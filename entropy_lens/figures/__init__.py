"""Rendering the paper's figures from the runs' results: Figures 1–5, 7 and 10–12 and a README with the
headline numbers (`render`). The runs themselves (scans, sweep, head-scale search, their cache and
`FiguresConfig`) live in `entropy_lens.runs.figures`; this package only draws and writes.
"""

from entropy_lens.figures.render import render

__all__ = ["FIGURES", "TABLES", "render"]

FIGURES = ("01", "02", "03", "04", "05", "07", "10", "11", "12", "13", "14")
TABLES = ("02",)  # the paper's tables this package draws: table-NN.png/.pdf and a README section
