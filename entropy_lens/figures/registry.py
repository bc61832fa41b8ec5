"""The registry of the paper's figures and tables: adding one is one function plus one line.

    @figure("figure-13", differences=schedules_differences)
    def schedules(data: FigureData, c: FiguresConfig) -> Drawn: ...

registers a builder under its file stem ("figure-NN" or "table-NN"), with the function that words its
deliberate differences from the paper and the font size it is drawn at. `render` draws every item of
`items()` into `stem.png`/`.pdf` and a README section, in the README's order: figures by number, then
tables. The builders live in the modules of `MODULES`, grouped by kind; `items()` imports them, so a
figure added to one of them needs nothing else (a new module: one name in `MODULES`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, NamedTuple

from entropy_lens.errors import EntropyLensError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from entropy_lens.figures.config import FiguresConfig
    from entropy_lens.figures.record import FigureData

__all__ = ["KINDS", "MODULES", "Drawn", "Item", "figure", "item", "items", "select", "summary"]

KINDS = ("figure", "table")  # the README lists every figure, then every table
# entropy_lens.figures.<module>: the builders
MODULES = ("curves", "heads", "scales", "losses", "passkey", "beyond", "training", "landing", "tables")


class Drawn(NamedTuple):
    """What a builder returns: the figure and the README's words for it."""

    figure: Figure  # saved as PNG and PDF
    caption: str  # the paragraph under the image (Table 2's holds its Markdown table)
    numbers: list[str]  # the headline numbers, one README bullet each


@dataclass(frozen=True)
class Item:
    stem: str  # "figure-07", "table-02": the files' stem and the README section's name
    draw: Callable[[FigureData, FiguresConfig], Drawn]
    differences: Callable[[FigureData, FiguresConfig], list[str]]  # its deliberate differences from the paper
    font_size: float | None = None  # paper_style's font size (None: the style's own)
    # why it cannot be drawn from these runs and settings (None: it can); the README says so in its place
    missing: Callable[[FigureData, FiguresConfig], str | None] | None = None

    @property
    def kind(self) -> str:
        return self.stem.split("-")[0]

    @property
    def number(self) -> str:
        return self.stem.split("-")[1]

    @property
    def title(self) -> str:
        """'Figure 7', 'Table 2'."""
        return f"{self.kind.capitalize()} {int(self.number)}"


_REGISTRY: dict[str, Item] = {}


def figure(
    stem: str, *, differences: Callable, font_size: float | None = None, missing: Callable | None = None
):
    """Register the decorated builder as the item `stem` ("figure-NN" or "table-NN"); `missing(data,
    config)` says why it cannot be drawn (None: it can), for an item whose inputs are optional."""
    kind, _, number = stem.partition("-")
    if kind not in KINDS or len(number) != 2 or not number.isdigit():
        raise ValueError(f"{stem!r} is not a figure's name; name it 'figure-NN' or 'table-NN'")

    def register(draw):
        name = f"{draw.__module__}.{draw.__qualname__}"
        old = _REGISTRY.get(stem)
        # the same function again (its module reloaded) replaces itself; another one is a clash
        if old is not None and f"{old.draw.__module__}.{old.draw.__qualname__}" != name:
            raise ValueError(
                f"{stem} is registered twice: {old.draw.__module__}.{old.draw.__qualname__}, {name}"
            )
        _REGISTRY[stem] = Item(stem, draw, differences, font_size, missing)
        return draw

    return register


def items() -> list[Item]:
    """Every registered figure and table, in the README's order."""
    for module in MODULES:
        import_module(f"entropy_lens.figures.{module}")
    return sorted(_REGISTRY.values(), key=lambda i: (KINDS.index(i.kind), i.number))


def item(stem: str) -> Item:
    """The registered item `stem`."""
    found = {i.stem: i for i in items()}
    if stem not in found:
        raise KeyError(f"no figure {stem!r}; registered: {', '.join(found)}")
    return found[stem]


def select(names: list[str]) -> list[Item]:
    """The items `names` name, in the README's order, each once: a figure's number ("17", "7"), its stem
    ("figure-17", "figure-7") or a table's ("table-02", "table-2")."""
    registered = items()
    stems = {i.stem: i for i in registered}
    chosen = set()
    for name in names:
        kind, dash, number = str(name).lower().rpartition("-")
        # "-1" is no figure: a dash needs a kind before it ("figure-1"), as 0 and 99 name none either
        stem = f"{kind or 'figure'}-{int(number):02d}" if number.isdigit() and (kind or not dash) else None
        if stem not in stems:
            raise EntropyLensError(
                f"no figure or table {name!r}; name one by number (17) or stem (figure-17, table-02): "
                f"{', '.join(stems)} (`entropy-lens figures --list` says what each is)"
            )
        chosen.add(stem)
    return [i for i in registered if i.stem in chosen]


def summary(i: Item) -> str:
    """One line on `i`: the first line of its builder's docstring."""
    return (i.draw.__doc__ or "").strip().split("\n")[0]
