"""The paper's tables, drawn and written: Table 2, sliding-window perplexity by window length."""

from __future__ import annotations

from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.plotting import DASHED, SOLID, TAB10, palette_colors, perplexity_by_length

__all__ = ["sliding_window_perplexity"]


def _perplexity_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    L = data.L
    return [
        (
            f"the embedded pair on {c.data} (the paper: TinyLlama-size models on PG19 and proof-pile test "
            "documents, 2M scored tokens per cell); windows may span the text's document boundaries"
        ),
        (
            f"rows: NoPE, RoPE, {_alibi_row(c)}RoPE with {c.ntk} (the paper: the best of an unstated NTK grid), the paper's "
            f"uniform scales {', '.join(f'{s:g}' for s in c.ppl_scales)}, s* of Figure 4, and λ(h) searched "
            f"at {data.short // L}L and {data.long // L}L here (the paper: 4K, 8K and 18K); no "
            "fine-tuned PI or YaRN rows"
        ),
        "mean NLL in float32 on CPU (the paper: bf16 with flash attention); a 95% interval per cell (an addition)",
    ]


def _alibi_row(c: FiguresConfig) -> str:
    if c.alibi is None:
        return "no ALiBi row (no alibi model set; the paper: BLOOM-1.1B and MPT-7B), "
    return f"ALiBi ({c.alibi}; the paper: BLOOM-1.1B and MPT-7B, pre-trained elsewhere), "


@figure("table-02", differences=_perplexity_differences)
def sliding_window_perplexity(data: FigureData, c: FiguresConfig) -> Drawn:
    """The paper's Table 2: sliding-window perplexity by window length (a table, and drawn)."""
    L = data.L
    cells = {name: [cell.ppl for cell in row.values()] for name, row in data.ppl.items()}
    lengths = [w.length for w in next(iter(cells.values()))]
    styles = [DASHED if name.startswith(("RoPE", "ALiBi")) else SOLID for name in cells]
    ax = perplexity_by_length(cells, colors=palette_colors(TAB10)[: len(cells)], styles=styles, train_len=L)
    ax.figure.set_size_inches(8, 6)
    stride = next(iter(cells.values()))[0].stride
    table = [
        "| | " + " | ".join(f"{w // L}L = {w}" for w in lengths) + " |",
        "|---" * (len(lengths) + 1) + "|",
    ]
    table += [f"| {name} | " + " | ".join(_ppl(w) for w in row) + " |" for name, row in cells.items()]
    scored = sorted({w.n_tokens for row in cells.values() for w in row})
    best = {w: min(cells, key=lambda n: cells[n][i].ppl) for i, w in enumerate(lengths)}
    numbers = [
        "lowest perplexity per window length: " + ", ".join(f"{w // L}L {name}" for w, name in best.items()),
        *(
            f"{name}: PPL ×{row[-1].ppl / row[0].ppl:.2f} from {lengths[0] // L}L to {lengths[-1] // L}L"
            for name, row in cells.items()
        ),
    ]
    caption = (
        f"Sliding-window perplexity (Press et al. 2022, the paper's Table 2 protocol) on {c.data}: windows of W "
        f"tokens starting every {stride} tokens (L/{L // stride}, as the paper's 256 at L = 2048), only the "
        f"last {stride} of each scored, {c.ppl_samples} windows per cell ({'/'.join(map(str, scored))} "
        "scored tokens); in brackets a 95% interval that treats the scored tokens as independent (a lower "
        "bound on the uncertainty).\n\n" + "\n".join(table)
    )
    return Drawn(ax.figure, caption, numbers)


def _ppl(w) -> str:
    """'41.2 [40.1–42.3]', in the paper's '>1e3' beyond a thousand."""
    if not w.ppl < 1e3:
        return "> 10³"
    return f"{w.ppl:.3g} [{_num(w.ppl_low)}–{_num(w.ppl_high)}]"


def _num(x: float) -> str:
    return f"{x:.3g}" if x < 1e3 else f"{x:,.0f}"
