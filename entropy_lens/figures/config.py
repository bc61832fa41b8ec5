"""`FiguresConfig`: the settings of `entropy-lens figures`, which the runs (`entropy_lens.figures.pipeline`)
read to choose what to run and the figures read to word their captions.

It imports neither torch nor the runs (`from entropy_lens.figures import FiguresConfig`). A YAML/JSON `--config` file holds a mapping of these
field names; `paper.yaml` beside this module has the paper's lengths (`--config paper`). Every value, from
the file, a flag or Python, is checked against its field's type and declared range
(`settings.check_fields`) before anything runs; multiples of L (short, long, fit, passkey_lengths) are at
most MOST_MULTIPLE, and the lengths they make are checked again against MAX_TOKENS by the runs' configs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import (
    MAX_COUNT,
    MAX_SEED,
    MAX_TOKENS,
    PASSKEY_MOST,
    Checked,
    check_fields,
    setting,
)

__all__ = ["MOST_MULTIPLE", "FiguresConfig"]

MOST_MULTIPLE = 1024  # the largest multiple of the training length L a figure setting may ask for


def _count(default: int, help: str, *, at_least: int = 1):
    return setting(default, cli=False, at_least=at_least, at_most=MAX_COUNT, help=help)


def _multiple(default: int, help: str):
    return setting(default, cli=False, at_least=1, at_most=MOST_MULTIPLE, help=help)


# (the list fields carry `noqa: RUF009`: ruff does not know that setting() returns a dataclasses.field)
def _scales(*default: float, help: str):
    return setting(default_factory=lambda: list(default), cli=False, above=0, help=help)


@dataclass
class FiguresConfig(Checked):
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
    train_len: int | None = setting(
        None, at_least=1, at_most=MAX_TOKENS, help="training length L (default: the NoPE checkpoint's)"
    )
    data: str = setting("austen:persuasion", help="evaluation text (held out of the tiny pair's training)")
    search_data: str = "austen-minus:persuasion"  # head-scale search text (the training novels)
    samples: int = setting(128, at_least=1, at_most=MAX_COUNT, help="windows per scan")
    sweep_samples: int = _count(64, "windows per scan of Figure 7's sweep")
    short: int = _multiple(2, "the short length, a multiple of L (Figures 1-3)")
    long: int = _multiple(4, "the long length, a multiple of L (Figures 4, 5, 10-12)")
    fit: int = _multiple(8, "Figure 7's sweep length, a multiple of L")
    length: int | None = setting(
        None,
        flag="--len",
        at_least=2,
        at_most=MAX_TOKENS,
        help="Figure 7's sweep length in tokens (default 8L)",
    )
    fig1_scale: float = setting(1.2, cli=False, above=0, help="Figure 1's uniform scale s")
    nope_scales: list[float] = _scales(0.9, 1.0, 1.1, 1.2, help="NoPE's uniform scales")  # noqa: RUF009
    rope_scales: list[float] = _scales(0.8, 1.0, 1.2, 1.4, help="RoPE's uniform scales")  # noqa: RUF009
    ntk: str = "dynamic:2"
    # Figure 7's grid: the paper's 0.01 step from 0.9 (the paper's plot starts there) to 3.2, and coarser
    # around it, so that no best scale of the tiny models is censored at the grid's edge: 0.1-0.8 and
    # 0.05-0.01 below (s -> 0 is uniform attention; beyond 3L some positions prefer it) and 3.3-4.0 above
    sweep_scales: str = "0.01,0.02,0.05,0.1:0.8:0.1,0.9:3.2:0.01,3.3:4:0.1"
    fit_smooth: int = setting(  # Figure 7's second fit: argmin of loss curves smoothed ±fit_smooth (0: none)
        25, cli=False, at_least=0, at_most=MAX_TOKENS, help="half-width of Figure 7's smoothed fit"
    )
    # the grid edges at which a raw argmin over [L, len) is refused ("lower", "upper"); the others are
    # reported in the README
    refuse_grid_edges: list[str] = field(default_factory=lambda: ["upper"])
    # the share of fitted positions allowed on a refused edge (censored values too few to move the fit;
    # counted in the README)
    grid_edge_tolerance: float = setting(
        0.01, cli=False, at_least=0, help="share of fitted positions allowed on a refused edge, below 1"
    )
    smooth: int = setting(  # loss smoothing half-width in Figures 1, 2, 4
        8, cli=False, at_least=0, at_most=MAX_TOKENS, help="loss smoothing half-width"
    )
    # Table 2: sliding-window perplexity at L, 2L, ..., fit·L; windows every ppl_stride tokens (None: L/8,
    # the paper's 256 at L = 2048), the last ppl_stride of each scored; the paper's uniform scales
    ppl_samples: int = _count(128, "windows per length of Table 2")
    ppl_stride: int | None = setting(
        None, cli=False, at_least=1, at_most=MAX_TOKENS, help="Table 2's stride (default L/8)"
    )
    ppl_scales: list[float] = _scales(1.2, 1.5, 1.8, help="Table 2's uniform scales")  # noqa: RUF009
    # Figures 6, 8, 9, 16: passkey retrieval at these multiples of L (the paper: 16 lengths up to twice each
    # model's context; one grid here, so the panels compare), depths x keys trials per length (the paper:
    # 10 x 10). Empty: not drawn
    passkey_lengths: list[float] = setting(  # noqa: RUF009
        default_factory=lambda: [1, 1.5, 2, 3, 4, 6, 8],
        cli=False,
        above=0,
        at_most=MOST_MULTIPLE,
        help="passkey lengths as multiples of L",
    )
    passkey_depths: int = setting(10, cli=False, at_least=1, at_most=PASSKEY_MOST, help="passkey depths")
    passkey_keys: int = setting(
        10, cli=False, at_least=1, at_most=PASSKEY_MOST, help="passkey keys per depth"
    )
    # Figure 17: the row statistics beyond entropy by position (scans with --stats all), for the embedded
    # models at fit·L and for a real pretrained model at real_multiple × its training length; each run is
    # kept as its means over stat_bins bins of positions (analysis.StatCurves), per head
    real: str | None = setting(
        "smollm2", cli=False, help="a real pretrained model for Figure 17's second row (None: left out)"
    )
    real_train_len: int | None = setting(  # SmolLM2's GGUF declares 8192 too
        8192,
        cli=False,
        at_least=2,
        at_most=MAX_TOKENS,
        help="the real model's training context (None: what its config declares)",
    )
    real_multiple: int = _multiple(2, "Figure 17's real-model length, a multiple of its training length")
    # every window austen:persuasion holds at 16K + 1 tokens (7); its time: docs/internals/layout.md
    real_samples: int = _count(7, "windows of Figure 17's real-model scan")
    first_keys: int = setting(
        1, cli=False, at_least=1, at_most=MAX_TOKENS, help="K of Figure 17's first-key mass (keys j < K)"
    )
    stat_bins: int = _count(256, "bins of positions Figure 17's runs are kept in")
    # Figure 19: attention received by key position at long·L, over the rows beyond L, of NoPE, RoPE and
    # NoPE with this uniform scale λ = s/√d
    received_scale: float = setting(1.4, cli=False, above=0, help="Figure 19's uniform scale s of NoPE")
    # Figure 18: rerun each embedded model's pretraining (its training.json's recipe) with the monitor;
    # false: only the λ(h) search is watched (the cache's histories are still drawn)
    watch_training: bool = True
    search_steps: int = _count(200, "steps of the λ(h) search")
    search_lr: float = setting(0.1, cli=False, above=0, help="learning rate of the λ(h) search")
    search_batch: int = _count(8, "windows per step of the λ(h) search")
    device: str = setting("auto", help="cpu, cuda, ...")
    dtype: str = "auto"
    batch_size: int = _count(8, "sequences per forward pass")
    seed: int = setting(0, cli=False, at_least=0, at_most=MAX_SEED, help="which windows are drawn")

    @classmethod
    def from_file(cls, path: str | Path, **overrides) -> FiguresConfig:
        """Settings from a YAML or JSON mapping (keys = field names), then `overrides` (None ignored).
        `path` "paper" names the packaged paper.yaml (the paper's lengths; fill in checkpoint paths)."""
        import yaml

        path = Path(__file__).with_name("paper.yaml") if str(path) == "paper" else Path(path)
        if not path.is_file():
            raise EntropyLensError(f"--config {path} does not exist; pass a YAML file of figure settings")
        try:
            values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError:
            raise EntropyLensError(
                f"--config {path} is not a text file; pass a YAML file of figure settings"
            ) from None
        except yaml.YAMLError as e:
            reason = " ".join(str(e).split())  # one line
            raise EntropyLensError(f"--config {path} is not valid YAML ({reason}); fix the file") from None
        if not isinstance(values, dict):
            raise EntropyLensError(
                f"--config {path} must hold a mapping of settings, not {type(values).__name__}"
            )
        return cls.build(values, source=str(path), **overrides)

    @classmethod
    def build(cls, values: dict, *, source: str = "settings", **overrides) -> FiguresConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(map(str, set(values) - names))
        if unknown:
            raise EntropyLensError(f"{source}: unknown settings {unknown}; known: {', '.join(sorted(names))}")
        values = {**values, **{k: v for k, v in overrides.items() if v is not None}}
        check_fields(cls, values, where=source)  # types and ranges, named as the file names them
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
        if lengths != sorted(set(lengths)):
            raise EntropyLensError(
                f"{source}: passkey_lengths {lengths} must be positive multiples of L, ascending, e.g. [1, 2, 4]"
            )
        if not config.short < config.long <= config.fit:
            raise EntropyLensError(
                f"{source}: lengths must satisfy short < long <= fit (multiples of L), "
                f"got {config.short}, {config.long}, {config.fit}"
            )
        return config
