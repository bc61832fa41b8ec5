"""`FiguresConfig`: the settings of `entropy-lens figures`, which the runs (`entropy_lens.runs.figures`)
read to choose what to run and the figures read to word their captions.

It lives here, below `runs/`, so the figure builders may import it; `entropy_lens.runs` re-exports it
(`from entropy_lens.runs import FiguresConfig`). A YAML/JSON `--config` file holds a mapping of these
field names; `paper.yaml` beside this module has the paper's lengths (`--config paper`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import setting

__all__ = ["FiguresConfig"]


@dataclass
class FiguresConfig:
    nope: str = setting("tiny-nope", flag="--nope-ckpt", help="NoPE checkpoint")
    rope: str = setting("tiny-rope", flag="--rope-ckpt", help="its RoPE twin")
    # an early checkpoint of the NoPE model's run (Figure 7's left panel; the paper: 10K of 50K steps);
    # None: the panel is left out
    early: str | None = setting(
        "tiny-nope-step300",
        flag="--early-ckpt",
        help="an early checkpoint of the NoPE model's run, Figure 7's left panel",
    )
    # an ALiBi baseline trained as the pair (Figure 8, Table 2's ALiBi row); None: neither is made
    alibi: str | None = setting("tiny-alibi", flag="--alibi-ckpt", help="an ALiBi model trained as the pair")
    head_scales: str | None = setting(  # λ(h) for `nope` at long·L (file or checkpoint); None: search them
        None, flag="--head-scale-ckpt", help="searched λ(h) for the NoPE model at 4L (default: search them)"
    )
    short_head_scales: str | None = None  # λ(h) at short·L for Figure 3 (the paper's hs4k); None: search
    train_len: int | None = setting(None, help="training length L (default: the NoPE checkpoint's)")
    data: str = setting("austen:persuasion", help="evaluation text (held out of the tiny pair's training)")
    search_data: str = "austen-minus:persuasion"  # head-scale search text (the training novels)
    samples: int = setting(128, help="windows per scan")
    sweep_samples: int = 64
    short: int = 2
    long: int = 4
    fit: int = 8
    length: int | None = setting(None, flag="--len", help="Figure 7's sweep length in tokens (default 8L)")
    fig1_scale: float = 1.2
    nope_scales: list[float] = field(default_factory=lambda: [0.9, 1.0, 1.1, 1.2])
    rope_scales: list[float] = field(default_factory=lambda: [0.8, 1.0, 1.2, 1.4])
    ntk: str = "dynamic:2"
    # Figure 7's grid: the paper's 0.01 step from 0.9 (the paper's plot starts there) to 3.2, and coarser
    # around it, so that no best scale of the tiny models is censored at the grid's edge: 0.1-0.8 and
    # 0.05-0.01 below (s -> 0 is uniform attention; beyond 3L some positions prefer it) and 3.3-4.0 above
    sweep_scales: str = "0.01,0.02,0.05,0.1:0.8:0.1,0.9:3.2:0.01,3.3:4:0.1"
    fit_smooth: int = 25  # Figure 7's second fit: argmin of loss curves smoothed ±fit_smooth (0: none)
    # the grid edges at which a raw argmin over [L, len) is refused ("lower", "upper"); the others are
    # reported in the README
    refuse_grid_edges: list[str] = field(default_factory=lambda: ["upper"])
    # the share of fitted positions allowed on a refused edge (censored values too few to move the fit;
    # counted in the README)
    grid_edge_tolerance: float = 0.01
    smooth: int = 8  # loss smoothing half-width in Figures 1, 2, 4
    # Table 2: sliding-window perplexity at L, 2L, ..., fit·L; windows every ppl_stride tokens (None: L/8,
    # the paper's 256 at L = 2048), the last ppl_stride of each scored; the paper's uniform scales
    ppl_samples: int = 128
    ppl_stride: int | None = None
    ppl_scales: list[float] = field(default_factory=lambda: [1.2, 1.5, 1.8])
    # Figures 6, 8, 9, 16: passkey retrieval at these multiples of L (the paper: 16 lengths up to twice each
    # model's context; one grid here, so the panels compare), depths x keys trials per length (the paper:
    # 10 x 10). Empty: not drawn
    passkey_lengths: list[float] = field(default_factory=lambda: [1, 1.5, 2, 3, 4, 6, 8])
    passkey_depths: int = 10
    passkey_keys: int = 10
    search_steps: int = 200
    search_lr: float = 0.1
    search_batch: int = 8
    device: str = setting("auto", help="cpu, cuda, ...")
    dtype: str = "auto"
    batch_size: int = 8
    seed: int = 0

    @classmethod
    def from_file(cls, path: str | Path, **overrides) -> FiguresConfig:
        """Settings from a YAML or JSON mapping (keys = field names), then `overrides` (None ignored).
        `path` "paper" names the packaged paper.yaml (the paper's lengths; fill in checkpoint paths)."""
        import yaml

        path = Path(__file__).with_name("paper.yaml") if str(path) == "paper" else Path(path)
        if not path.is_file():
            raise EntropyLensError(f"--config {path} does not exist; pass a YAML file of figure settings")
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise EntropyLensError(f"--config {path} is not valid YAML ({e}); fix the file") from None
        if not isinstance(values, dict):
            raise EntropyLensError(
                f"--config {path} must hold a mapping of settings, not {type(values).__name__}"
            )
        return cls.build(values, source=str(path), **overrides)

    @classmethod
    def build(cls, values: dict, *, source: str = "settings", **overrides) -> FiguresConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise EntropyLensError(f"{source}: unknown settings {unknown}; known: {', '.join(sorted(names))}")
        values = {**values, **{k: v for k, v in overrides.items() if v is not None}}
        config = cls(**values)
        bad = sorted(set(config.refuse_grid_edges) - {"lower", "upper"})
        if bad:
            raise EntropyLensError(f"{source}: refuse_grid_edges takes 'lower' and 'upper', not {bad}")
        if not 0 <= config.grid_edge_tolerance < 1:
            raise EntropyLensError(
                f"{source}: grid_edge_tolerance {config.grid_edge_tolerance} is a share of the fitted positions; "
                "pass a value in [0, 1)"
            )
        lengths = config.passkey_lengths
        if any(x <= 0 for x in lengths) or lengths != sorted(set(lengths)):
            raise EntropyLensError(
                f"{source}: passkey_lengths {lengths} must be positive multiples of L, ascending, e.g. [1, 2, 4]"
            )
        if config.passkey_depths < 1 or config.passkey_keys < 1:
            raise EntropyLensError(f"{source}: passkey_depths and passkey_keys must be at least 1")
        if not config.short < config.long <= config.fit:
            raise EntropyLensError(
                f"{source}: lengths must satisfy short < long <= fit (multiples of L), "
                f"got {config.short}, {config.long}, {config.fit}"
            )
        return config
