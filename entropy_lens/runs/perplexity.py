"""perplexity(config) -> {W: ...}: sliding-window perplexity at several window lengths (the paper's Table 2).

Press et al. (2022)'s protocol: for a window length W, windows of W tokens start every S tokens of
the packed text, and only each window's last S tokens are scored, so every scored token sees at least
W − S tokens of context and none is scored twice; PPL = exp(mean NLL). One loss-only scan per W
(`ScanConfig(length=W, stride=S, entropy="none")`) draws `samples` such windows (seeded) and
`analysis.sliding_window_ppl` reads the perplexity off its last S positions: `samples · S` scored
tokens per length.

The default stride is L/8 for a model trained at L tokens (its config's `train_len`, or `train_len`
here): the paper's S = 256 at L = 2048. The lengths are the caller's: the paper's 1L, 2L, 4L, 8L.

`scan` may be any callable taking a ScanConfig and returning a ScanResult (the figures pass their
cached scan); the default runs `runs.scan.scan` and writes nothing. The longest length runs first:
it fills the fewest windows, so a text too short for `samples` is refused before any forward pass.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from dataclasses import asdict, dataclass

from entropy_lens.analysis import WindowPPL, sliding_window_ppl
from entropy_lens.errors import EntropyLensError
from entropy_lens.models import declared_train_len
from entropy_lens.results import ScanResult, provenance
from entropy_lens.runs.scan import ScanConfig
from entropy_lens.runs.scan import scan as run_scan

__all__ = ["PPL_KIND", "PerplexityConfig", "perplexity", "perplexity_record"]

PPL_KIND = "entropy_lens.ppl"  # the `kind` of the JSON `entropy-lens ppl --out` writes
STRIDE_FRACTION = 8  # default S = L / 8: the paper's 256 of L = 2048


@dataclass(frozen=True)
class PerplexityConfig:
    """Everything that determines a sliding-window perplexity table for one model (lengths in tokens)."""

    model: str
    lengths: tuple[int, ...]  # window lengths W, ascending
    stride: int | None = None  # S, scored tokens per window; None: train_len // 8
    samples: int = 256  # windows per length
    data: str = "austen:persuasion"
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 1
    train_len: int | None = None  # overrides the checkpoint's declared training length L
    nope: bool | None = None  # None: as the checkpoint declares; True forces rotary off
    # the variant, at most one: uniform multiplier s (λ = s/√d), per-head multipliers file, RoPE scaling
    scale: float | None = None
    head_scales: str | None = None
    rope_scaling: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "lengths", tuple(operator.index(w) for w in self.lengths))

    def to_dict(self) -> dict:
        return {**asdict(self), "lengths": list(self.lengths)}

    def scan_config(self, length: int) -> ScanConfig:
        """The loss-only scan of windows of `length` tokens."""
        names = {f.name for f in dataclasses.fields(ScanConfig)}
        shared = {k: v for k, v in asdict(self).items() if k in names}
        return ScanConfig(**shared, length=length, entropy="none")

    def resolved(self) -> PerplexityConfig:
        """This config with the default stride filled in from the training length L (reads the
        checkpoint's config.json when `train_len` is not given)."""
        if self.stride is not None:
            return self
        L = self.train_len if self.train_len is not None else declared_train_len(self.model)
        if L is None:
            raise EntropyLensError(
                f"{self.model} declares no training length L for the default stride L/8; pass --stride S "
                "(the paper scores the last 256 tokens at L = 2048) or --train-len L"
            )
        return dataclasses.replace(self, stride=max(1, L // STRIDE_FRACTION))

    def check(self) -> None:
        if not self.lengths:
            raise EntropyLensError("no window lengths; pass --lens W [W ...], e.g. --lens 128 256 512 1024")
        if any(b <= a for a, b in zip(self.lengths, self.lengths[1:])):
            raise EntropyLensError(
                f"--lens {' '.join(map(str, self.lengths))} are not ascending; pass each length once, "
                f"shortest first: --lens {' '.join(map(str, sorted(set(self.lengths))))}"
            )
        variants = [
            f"--{k.replace('_', '-')}" for k in ("scale", "head_scales", "rope_scaling") if getattr(self, k)
        ]
        if len(variants) > 1:
            raise EntropyLensError(f"{' and '.join(variants)} both given; pass one variant per table row")
        if self.stride is not None and self.stride < 1:
            raise EntropyLensError(
                f"--stride must be at least 1 (got {self.stride}): it is the tokens scored per window; pass "
                f"--stride 1 or more, or omit it for L/{STRIDE_FRACTION} of the model's training length L"
            )
        if self.stride is not None and self.lengths[0] <= self.stride:
            raise EntropyLensError(
                f"--lens {self.lengths[0]} is not longer than --stride {self.stride}: a window must hold "
                f"context before its {self.stride} scored tokens; pass lengths above {self.stride} or a "
                "smaller --stride"
            )
        for length in self.lengths:
            self.scan_config(length).check()


def perplexity(config: PerplexityConfig, *, scan=None, progress: bool = True) -> dict[int, dict]:
    """{W: {"ppl": WindowPPL, "wall_time_s": the scan's own time, "result": its ScanResult}} for each
    W in `config.lengths`, in order. `scan(ScanConfig) -> ScanResult` defaults to `runs.scan.scan`."""
    config.check()  # lengths and flags first: resolving the stride may read the checkpoint
    config = config.resolved()
    config.check()
    scan = scan or functools.partial(run_scan, progress=progress)
    rows: dict[int, dict] = {}
    # longest first: it has the fewest windows, so a text too short for `samples` fails before any work
    for i, length in enumerate(reversed(config.lengths)):
        if progress:
            print(
                f"[{i + 1}/{len(config.lengths)}] len {length}: {config.samples} windows every "
                f"{config.stride} tokens",
                flush=True,
            )
        result: ScanResult = scan(config.scan_config(length))
        rows[length] = {
            "ppl": sliding_window_ppl(result, config.stride),
            "wall_time_s": float(result.meta.get("wall_time_s", math.nan)),
            "result": result,
        }
    return {length: rows[length] for length in config.lengths}


def perplexity_record(config: PerplexityConfig, rows: dict[int, dict]) -> dict:
    """The JSON-ready record of a perplexity run: config (stride resolved), provenance and one entry per
    length (nats; a NaN, e.g. the stderr of one window per position, becomes null)."""
    config = config.resolved()
    entries = []
    for row in rows.values():
        window: WindowPPL = row["ppl"]
        meta = row["result"].meta
        entries.append(
            {
                **{k: _json_number(v) for k, v in asdict(window).items()},
                "wall_time_s": _json_number(row["wall_time_s"]),
                "data_description": meta.get("data_description"),
                "train_len": meta.get("train_len"),
                "device": meta.get("device"),
                "dtype": meta.get("dtype"),
            }
        )
    return {
        "kind": PPL_KIND,
        "config": config.to_dict(),
        "units": "nats",
        "interval": "95%, exp(nll -/+ 1.96 stderr); stderr treats scored tokens as independent (a lower bound)",
        "provenance": provenance(),
        "lengths": entries,
    }


def _json_number(x):
    """x, with NaN and inf as None (JSON has neither)."""
    return None if isinstance(x, float) and not math.isfinite(x) else x
