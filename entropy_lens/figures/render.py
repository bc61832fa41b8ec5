"""Render every registered figure and table (`registry.items()`) from the runs' record, and the README
beside them: `render` saves stem.png and stem.pdf per item and writes README.md (`readme.py`)."""

from __future__ import annotations

from pathlib import Path

from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.readme import readme
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import Item, items
from entropy_lens.plotting import paper_style
from entropy_lens.results import atomic_write_text

__all__ = ["render"]


def render(
    data: FigureData, config: FiguresConfig, out: Path, *, only: list[Item] | None = None
) -> list[Path]:
    """Save every figure as figure-NN.png and .pdf (tables as table-NN) in `out` and write out/README.md;
    returns the files written. `only`: these items instead of every registered one, in this order. An
    item that cannot be drawn from these runs (`Item.missing`) gets a README section saying why."""
    import matplotlib.pyplot as plt

    sections, written = [], []
    for item in items() if only is None else only:
        why = item.missing(data, config) if item.missing else None
        if why:  # its section says why, in its place
            sections.append((item, why, []))
            continue
        with paper_style(font_size=item.font_size):
            drawn = item.draw(data, config)
            different = item.differences(data, config)
            for ext in ("png", "pdf"):
                path = out / f"{item.stem}.{ext}"
                # no creation date in the PDF: the same figure is the same bytes
                drawn.figure.savefig(path, metadata={"CreationDate": None} if ext == "pdf" else None)
                written.append(path)
            plt.close(drawn.figure)
        sections.append((item, drawn, different))
    written.append(atomic_write_text(out / "README.md", readme(sections, data, config)))
    return written
