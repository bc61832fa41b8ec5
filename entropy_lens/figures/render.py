"""Render every registered figure and table (`registry.items()`) from the runs' record, and the README
beside them: `render` saves stem.png and stem.pdf per item and writes README.md (`readme.py`)."""

from __future__ import annotations

from pathlib import Path

from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.readme import readme
from entropy_lens.figures.readme import splice as splice_readme
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import Item, items
from entropy_lens.plotting import paper_style
from entropy_lens.results import atomic_write_text, check_regular_target

__all__ = ["check_targets", "render"]

EXTENSIONS = ("png", "pdf")


def check_targets(out: Path, only: list[Item] | None = None) -> None:
    """Refuse, before any work, a file `render` would write in `out` (each item's stem.png and .pdf, the
    README) that is not a regular file: savefig writes into a device or a FIFO, a rename replaces it."""
    chosen = items() if only is None else only
    for path in [out / f"{item.stem}.{ext}" for item in chosen for ext in EXTENSIONS] + [out / "README.md"]:
        check_regular_target(path)


def render(
    data: FigureData,
    config: FiguresConfig,
    out: Path,
    *,
    only: list[Item] | None = None,
    splice: bool = False,
) -> list[Path]:
    """Save every figure as figure-NN.png and .pdf (tables as table-NN) in `out` and write out/README.md;
    returns the files written. `only`: these items instead of every registered one, in this order. An
    item that cannot be drawn from these runs (`Item.missing`) gets a README section saying why.

    `splice`: rewrite only the sections of `only` in an out/README.md already there, every other line as
    it was (where there is none, a README of just these, its time that of the runs they read). Each item
    reads only the fields of `data` it draws, so only their runs are resolved."""
    import matplotlib.pyplot as plt

    check_targets(out, only)
    sections, written = [], []
    for item in items() if only is None else only:
        why = item.missing(data, config) if item.missing else None
        if why:  # its section says why, in its place
            sections.append((item, why, []))
            continue
        with paper_style(font_size=item.font_size):
            drawn = item.draw(data, config)
            different = item.differences(data, config)
            for ext in EXTENSIONS:
                path = out / f"{item.stem}.{ext}"
                # no creation date in the PDF: the same figure is the same bytes
                drawn.figure.savefig(path, metadata={"CreationDate": None} if ext == "pdf" else None)
                written.append(path)
            plt.close(drawn.figure)
        sections.append((item, drawn, different))
    old = out / "README.md"
    if splice and old.is_file():
        text = splice_readme(old.read_text(encoding="utf-8"), sections, items())
    else:
        # drawn alone, the time is that of the runs these items read; every item: of every run
        text = readme(sections, data, config, compute=data.runs.compute_time() if splice else None)
    written.append(atomic_write_text(old, text))
    return written
