"""`FigureData`: everything the paper's figures are drawn from, one typed record that every figure
builder and the README read, each field resolved on first use by the runs behind it
(`entropy_lens.figures.pipeline.Runs`, through `figure_data`): drawing one figure runs, or reads from the
cache, only what that figure reads.

It holds results, never settings: the settings stay in `FiguresConfig`, and what the runs decided from
them (the lengths in tokens, s* at each length, which λ(h) were given and where each search started)
is written here, so a figure never re-derives it. Lengths and positions are in tokens; a ScanResult
stores entropy and loss in nats (`entropy (layer, head, pos)`, `mean_entropy (pos,)`, `loss (pos,)`);
scales are multipliers s of 1/√d (λ = s/√d).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from entropy_lens.errors import EntropyLensError

if TYPE_CHECKING:  # types only: the record is filled by the runs, which import these themselves
    import numpy as np

    from entropy_lens.analysis import ScaleFit, StatCurves, Sweep, UniformChoice, WindowPPL
    from entropy_lens.figures.watching import Watched
    from entropy_lens.results import ScanResult

__all__ = [
    "FIELDS",
    "Ablation",
    "Ablations",
    "BeyondEntropy",
    "ComputeTime",
    "FigureData",
    "HeadScales",
    "KeysReceived",
    "PasskeyPanel",
    "Passkeys",
    "PerplexityCell",
    "Published",
    "Schedules",
    "SweepFit",
]


@dataclass(frozen=True)
class SweepFit:
    """One panel of Figure 7: a model's uniform-scale sweep and the log fit to its best scales."""

    model: str  # the checkpoint as configured (`nope`, or `early`)
    steps: int | None  # optimiser steps it was trained for; None where its checkpoint records none
    passkey_steps: int | None  # how many of `steps` were a passkey phase (train-tiny); None: as `steps`
    sweep: Sweep  # loss (scale, pos) at fit_len, one scan per scale (ascending)
    fit: ScaleFit  # s = 1 + a ln(i/L) fitted to the raw argmin over [L, fit_len) (the paper's fit)
    fit_smoothed: ScaleFit | None  # the same on loss curves smoothed ±fit_smooth; None when fit_smooth is 0


@dataclass(frozen=True)
class HeadScales:
    """The per-head scales λ(h) used at one length: given by a setting, or searched by the runs."""

    length: int  # tokens: the sequence length they were searched at (and are evaluated at)
    file: str  # absolute path of the λ(h) file or checkpoint the scans read
    given: (
        str | None
    )  # the setting that named them, as written (head_scales / short_head_scales); None: searched
    uniform: UniformChoice  # s* at `length`: the best single scale for [length − L/2, length)
    init: float | None  # the search's initial multiplier: s*, or the focus bound where s* lies below it;
    # None when given


@dataclass(frozen=True)
class Schedules:
    """Figure 13 (§2.4's negative claim): position-dependent scales at fit_len, loss only."""

    uniform: UniformChoice  # the sweep's best single scale for [L, fit_len): the piecewise scale beyond L
    a: float  # the log schedule's a: Figure 7's raw fit, taken as 0 where that is negative
    piecewise: ScanResult  # 1 inside L, uniform.scale beyond
    log: ScanResult  # m(i) = 1 + a ln(max(i, L)/L)
    heads: ScanResult  # λ(h) searched at long·L
    heads_log: ScanResult  # λ(h) with the log schedule on top


@dataclass(frozen=True)
class Published:
    """Figure 15: the published temperature schedules at fit_len beside NoPE, the best uniform scale and
    λ(h), with entropy (averaged over each layer's heads); the sweep's windows."""

    a: float  # Figure 7's raw fit (0 where negative): the fitted variants' a
    runs: dict[str, ScanResult]  # {label: scan}: "NoPE", "uniform", "λ(h)", then each schedule's variants
    schedules: dict[str, str]  # {label: its --scale-schedule} for the schedule variants, in order


@dataclass(frozen=True)
class Ablation:
    """One ablation of the λ(h) search (the paper's Table 4), evaluated by a scan at long·L."""

    file: str  # absolute path of the searched λ(h)
    scales: np.ndarray  # (layer, head) float64: the searched multipliers of 1/√d
    result: ScanResult  # the NoPE model with them, at long·L


@dataclass(frozen=True)
class Ablations:
    """Figure 14: the λ(h) search at long·L with one thing changed each."""

    no_constraint: Ablation  # lower bound 0 instead of the focus bound 1/√d
    init_one: Ablation  # started from 1.0 instead of s*


@dataclass(frozen=True)
class PasskeyPanel:
    """One passkey heat map (Figures 6, 8, 9): a model variant's `entropy-lens passkey` record."""

    name: str  # the panel's title ("NoPE", "λ(h) 4L", ...)
    context: int  # tokens: its context length (the dashed line; the title averages the lengths within it)
    record: dict  # the passkey JSON (runs/passkey.py): "results", one cell per (length, depth)


@dataclass(frozen=True)
class Passkeys:
    """Passkey retrieval at the lengths `passkey_lengths` × L, `passkey_depths` × `passkey_keys` trials
    per length."""

    # Figure 6: RoPE, NoPE, RoPE with training-free YaRN of factors short and long, λ(h) at short·L, long·L
    families: list[PasskeyPanel]
    alibi: PasskeyPanel | None  # Figure 8: the ALiBi model; None without one (`alibi` unset)
    ablations: list[PasskeyPanel]  # Figure 9: the λ(h) ablations of Figure 14 (no constraint, init 1.0)

    @property
    def heads(self) -> PasskeyPanel:
        """λ(h) at long·L, the last of `families` (Figure 9 sets its ablations beside it)."""
        return self.families[-1]

    @property
    def panels(self) -> list[PasskeyPanel]:
        return [*self.families, *([self.alibi] if self.alibi else []), *self.ablations]


@dataclass(frozen=True)
class PerplexityCell:
    """One cell of Table 2: a window length's sliding-window perplexity and the scan behind it."""

    ppl: WindowPPL  # perplexity over the last `stride` positions of each window
    wall_time_s: float  # the scan's own wall time, seconds (NaN where unrecorded)
    result: ScanResult  # the loss-only scan at that window length


@dataclass(frozen=True)
class BeyondEntropy:
    """Figure 17: the row statistics beyond entropy (`--stats all`) by position, per head, each run kept
    as its means over bins of positions (`analysis.StatCurves`)."""

    scale: float  # s* (Figure 4's): the multiplier of the NoPE variant λ = s*/√d
    tiny: dict[str, StatCurves]  # {"NoPE", "NoPE s*", "RoPE", "ALiBi" (with an alibi model)}: at fit_len
    real: StatCurves | None  # the real pretrained model at real_multiple × its L; None: not configured
    real_train_len: int | None  # tokens: the real model's training context (None without one)


@dataclass(frozen=True)
class KeysReceived:
    """Figure 19: attention received by key position (`--stats received,received_mean`) of NoPE, RoPE
    and NoPE with λ = scale/√d at long·L, counted over the rows beyond L (`--query-window` long − L)."""

    scale: float  # received_scale: the multiplier s of the NoPE variant λ = s/√d
    window: int  # tokens: the counted query rows, the last `window` of each window
    runs: dict[str, ScanResult]  # {"NoPE", "RoPE", "NoPE λ=s/√d"}: per head, every window full


@dataclass(frozen=True)
class ComputeTime:
    """How long the runs behind the figures took, as their cached results record it (so a redraw from
    the cache reports the original runs, not itself)."""

    seconds: float  # the sum of the recorded wall times, each distinct run once
    runs: int  # distinct runs: scans, sweep scales and head-scale searches
    unrecorded: list[str]  # runs that record no time, in words ("the head-scale search at 512")
    threads: list[int]  # the CPU thread counts the scans record, ascending


class FigureData:
    """What the figures are drawn from, each field resolved on first use: reading one runs (or reads from
    the cache) only the runs behind it, once, so a builder that reads `data.beyond` resolves Figure 17's
    scans and the sweep that gives s*, nothing else. `runs` (figures.pipeline.Runs) does the runs; this
    class only says which each field is and what it is made from."""

    def __init__(self, runs):
        self.runs, self.config = runs, runs.config

    def replace(self, **fields) -> FigureData:
        """A copy with `fields` set to these values (as `dataclasses.replace`; every other field as
        resolved here, or resolved on first read)."""
        unknown = sorted(set(fields) - {*FIELDS, "compute"})
        if unknown:
            raise TypeError(f"FigureData has no field {', '.join(unknown)}; its fields: {', '.join(FIELDS)}")
        new = copy.copy(self)
        new.__dict__.update(fields)  # where cached_property keeps a resolved field
        return new

    def resolve_all(self) -> None:
        """Resolve every field (the NoPE model's sweep first: a grid too narrow for Figure 7's argmin is
        refused before any other run)."""
        for name in ("final", *FIELDS):
            getattr(self, name)

    @cached_property
    def compute(self) -> ComputeTime:
        """How long every run of the record took, as their results record it (every field resolved)."""
        self.resolve_all()
        return self.runs.compute_time()

    @cached_property
    def L(self) -> int:
        """Tokens: the NoPE model's training length."""
        return self.runs.train_len()

    @cached_property
    def short(self) -> int:
        """Tokens, short·L: Figures 1–3 (the paper's 4K = 2L)."""
        return self.config.short * self.L

    @cached_property
    def long(self) -> int:
        """Tokens, long·L: Figures 4, 5, 10–12 and 14 (8K = 4L)."""
        return self.config.long * self.L

    @cached_property
    def fit_len(self) -> int:
        """Tokens: Figures 7, 13, 15 and 17 (16K = 8L); at least `long`."""
        c = self.config
        fit_len = c.length or c.fit * self.L
        if fit_len < self.long:
            raise EntropyLensError(
                f"--len {fit_len} is shorter than Figure 4's {self.long} = {c.long}L; pass at least {self.long}"
            )
        return fit_len

    @cached_property
    def final(self) -> SweepFit:
        """Figure 7's right panel: the NoPE model's sweep at fit_len and its fits."""
        return self.runs.figure7(self.config.nope, self.L, self.fit_len)

    @cached_property
    def early(self) -> SweepFit | None:
        """Figure 7's left panel: an early checkpoint of the same run; None without one."""
        return self.runs.figure7(self.config.early, self.L, self.fit_len) if self.config.early else None

    @cached_property
    def uniform(self) -> UniformChoice:
        """s* for `long` sequences: the lowest mean loss over [long − L/2, long) (analysis.best_uniform_scale)."""
        from entropy_lens.analysis import best_uniform_scale

        return best_uniform_scale(self.final.sweep, length=self.long, train_len=self.L)

    @cached_property
    def short_uniform(self) -> UniformChoice:
        """s* for `short` sequences."""
        from entropy_lens.analysis import best_uniform_scale

        return best_uniform_scale(self.final.sweep, length=self.short, train_len=self.L)

    @property
    def uniform_scale(self) -> float:
        """s* for `long` sequences (Figures 4, 11, 14)."""
        return self.uniform.scale

    @cached_property
    def head_scales(self) -> HeadScales:
        """λ(h) at `long` (searched from uniform.scale unless given)."""
        return self.runs.head_scales(self.config.head_scales, self.long, self.uniform)

    @cached_property
    def short_head_scales(self) -> HeadScales:
        """λ(h) at `short` (Figure 3; searched from short_uniform.scale unless given)."""
        return self.runs.head_scales(self.config.short_head_scales, self.short, self.short_uniform)

    @cached_property
    def clamp(self) -> float:
        """The searches' lower bound on λ(h)·√d: the focus constraint, 1."""
        return self.runs.clamp(self.long)

    @cached_property
    def nope_family(self) -> dict[float, ScanResult]:
        """{s: NoPE at `short` with λ = s/√d} (Figure 2, left)."""
        return {s: self.runs.scan(self.config.nope, self.short, scale=s) for s in self.config.nope_scales}

    @cached_property
    def rope_family(self) -> dict[float, ScanResult]:
        """{s: RoPE at `short` with λ = s/√d} (Figure 2, right)."""
        return {s: self.runs.scan(self.config.rope, self.short, scale=s) for s in self.config.rope_scales}

    @cached_property
    def nope(self) -> ScanResult:
        """NoPE at `short` (Figures 1, 3)."""
        return self.runs.scan(self.config.nope, self.short)

    @cached_property
    def nope_scaled(self) -> ScanResult:
        """NoPE at `short` with λ = fig1_scale/√d (Figures 1, 3)."""
        return self.runs.scan(self.config.nope, self.short, scale=self.config.fig1_scale)

    @cached_property
    def rope(self) -> ScanResult:
        """RoPE at `short` (Figure 1)."""
        return self.runs.scan(self.config.rope, self.short)

    @cached_property
    def rope_ntk(self) -> ScanResult:
        """RoPE at `short` with HF NTK scaling `ntk` (Figure 1)."""
        return self.runs.scan(self.config.rope, self.short, rope_scaling=self.config.ntk)

    @cached_property
    def long_nope(self) -> ScanResult:
        """NoPE at `long` (Figures 5, 12)."""
        return self.runs.scan(self.config.nope, self.long)

    @cached_property
    def long_uniform(self) -> ScanResult:
        """NoPE at `long` with λ = s*/√d (Figures 4, 11, 14)."""
        return self.runs.scan(self.config.nope, self.long, scale=self.uniform.scale)

    @cached_property
    def long_heads(self) -> ScanResult:
        """NoPE at `long` with head_scales (Figures 4, 5, 10, 14)."""
        return self.runs.scan(self.config.nope, self.long, head_scales=self.head_scales.file)

    @cached_property
    def short_heads(self) -> ScanResult:
        """NoPE at `short` with short_head_scales (Figure 3)."""
        return self.runs.scan(self.config.nope, self.short, head_scales=self.short_head_scales.file)

    @cached_property
    def schedules(self) -> Schedules:
        """Figure 13."""
        return self.runs.schedules(self.final, self.head_scales.file, self.L, self.fit_len)

    @cached_property
    def published(self) -> Published:
        """Figure 15."""
        return self.runs.published(self.schedules, self.head_scales.file, self.L, self.fit_len)

    @cached_property
    def ablations(self) -> Ablations:
        """Figure 14: the λ(h) search at `long` without the focus constraint, and from 1.0."""
        return self.runs.ablations(self.long, self.uniform.scale)

    @cached_property
    def passkeys(self) -> Passkeys | None:
        """Figures 6, 8, 9, 16; None when no passkey_lengths are set."""
        if not self.config.passkey_lengths:
            return None
        return self.runs.passkeys(self.L, self.head_scales, self.short_head_scales, self.ablations)

    @cached_property
    def ppl(self) -> dict[str, dict[int, PerplexityCell]]:
        """Table 2: {row name: {window length W: cell}}, W = L..fit·L."""
        c, L, s_long = self.config, self.L, self.uniform.scale
        variants = {
            "NoPE": (c.nope, {}),
            "RoPE": (c.rope, {}),
            **({"ALiBi": (c.alibi, {})} if c.alibi else {}),
            f"RoPE NTK ({c.ntk})": (c.rope, {"rope_scaling": c.ntk}),
            **{f"NoPE λ={s:g}/√d": (c.nope, {"scale": s}) for s in c.ppl_scales},
            f"NoPE s*={s_long:g}": (c.nope, {"scale": s_long}),
            f"NoPE λ(h) {self.short // L}L": (c.nope, {"head_scales": self.short_head_scales.file}),
            f"NoPE λ(h) {self.long // L}L": (c.nope, {"head_scales": self.head_scales.file}),
        }
        table = self.runs.perplexity(L, variants)
        return {name: {W: PerplexityCell(**cell) for W, cell in row.items()} for name, row in table.items()}

    @cached_property
    def beyond(self) -> BeyondEntropy:
        """Figure 17."""
        return self.runs.beyond(self.fit_len, self.uniform.scale)

    @cached_property
    def watched(self) -> Watched:
        """Figure 18: the embedded models' pretraining and the λ(h) search at `long`, watched
        (figures/watching.py)."""
        return self.runs.watched(self.long, self.uniform.scale, searched=self.config.head_scales is None)

    @cached_property
    def received(self) -> KeysReceived:
        """Figure 19: attention received by key position at `long`, over the rows beyond L."""
        return self.runs.received(self.long, self.config.received_scale)


# the record's fields, in the order they are declared (`compute` summarises them all)
FIELDS = tuple(n for n, v in vars(FigureData).items() if isinstance(v, cached_property) and n != "compute")
