"""Every deliberate difference between a rendered figure and the paper's, in words, for figures/README.md.

Each figure's own list is registered with its builder (`@figure(..., differences=...)`, in the module of
its kind) and read here through the registry; `common_differences` are those of every figure. The lists
are built from the runs' record and the settings, so the README states what was run (model, data,
lengths, grids, counts), never a number typed by hand. The paper's own values (its lengths, smoothing,
layer choices) are quoted as the paper states them (the figure spec, the authors' notebooks).
"""

from __future__ import annotations

from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import item

__all__ = ["common_differences", "differences"]


def common_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    """Differences shared by every figure."""
    tiny = c.nope == "tiny-nope" and c.rope == "tiny-rope"
    models = (
        "the embedded tiny pair (2.6M-parameter Llama without and with RoPE, trained by this project) "
        f"stands in for TinyLlama-NoPE-1.1B and its RoPE twin; lengths are the paper's multiples of L, with "
        f"L = {data.L} here (the paper: 2048)"
        if tiny
        else f"models {c.nope} and {c.rope} at L = {data.L}"
    )
    return [
        models,
        (
            f"evaluation text {c.data}, {c.samples} windows per scan (the paper: SlimPajama validation, n not "
            "stated, at most 1000)"
        ),
        (
            f"entropy from {data.nope.meta.get('dtype', 'float32')} probabilities (the paper: half-precision "
            "probabilities)"
        ),
        "mathtext instead of LaTeX, and DejaVu Serif where Times New Roman is not installed",
    ]


def differences(stem: str, data: FigureData, c: FiguresConfig) -> list[str]:
    """The deliberate differences of `stem` ("figure-01", ..., "figure-14", "table-02") from the paper's."""
    return item(stem).differences(data, c)
