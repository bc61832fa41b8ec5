"""The settings of every run, each declared once (`entropy_lens.settings.setting`: its type, default and
help): first the groups the configs share (`generate` and the harness take some of them too), then the
configs composed of them; the CLI generates the flags from them (`cli/options.py`).

    Checkpoint   model, dtype, device                                 every command
    Loading      nope, rope_scaling, train_len, trust_remote_code, revision
    Text         data, seed
    Windows      samples, batch_size, stride, context_parallel (how each window is run)
    Slicing      the row-slice statistics' parameters: spans, offsets, ... (scan, generate)
    PositionScaling, Scaling   rope_scaling; scale, head_scales, scale_schedule: the variants of the
                 attention scale

    ScanConfig        Checkpoint + Loading + Text + Windows + Scaling + length, backend, fused, entropy,
                      stats (row and key statistics), first_keys, recent_keys, query_window
    PerplexityConfig  the same groups + lengths (samples, data and stride mean windows here: own defaults)
    HeadSearchConfig  Checkpoint + Text + the search's own (length, init, steps, lr, batch, ...)

No torch at import (`entropy-lens --help` builds every flag from here); `check()` imports what it needs.
Each number's range is declared with it (`setting(at_least=, above=, at_most=)`) and checked when a config
is made (`settings.Checked`) and when its flag is parsed; `check()` adds what spans several settings and
what needs an import. Names follow the glossary (docs/reference/glossary.md).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import ClassVar

from entropy_lens import settings
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import BACKENDS, FUSED_MODES, Measure, Stats, parse_stats, split_slices
from entropy_lens.results import ENTROPY_REDUCTIONS
from entropy_lens.settings import MAX_COUNT, MAX_SEED, MAX_TOKENS, PASSKEY_MOST, Checked, Recorded, setting
from entropy_lens.statistics import (
    DEFAULT_STATS,
    DISTANCE_BINS,
    ENTROPY,
    EXTRA_STATS,
    FIRST_KEYS,
    KEY_STATISTICS,
    OFFSETS,
    PARAMETERS,
    QUERY_WINDOW,
    RECENT_KEYS,
    SINK_MASS,
    SPANS,
)

__all__ = [
    "LOADED_KEY",
    "SCALED_KEY",
    "STRIDE_FRACTION",
    "SWEEP_ENTROPY",
    "VARIANTS",
    "Checkpoint",
    "HeadSearchConfig",
    "Loading",
    "PasskeyConfig",
    "PerplexityConfig",
    "PositionScaling",
    "Scaling",
    "ScanConfig",
    "Slicing",
    "Text",
    "Windows",
]


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    model: str = setting(
        flag="model",
        metavar="CKPT",
        help="Hugging Face folder or Hub id (org/name), .gguf file, or bundled name (listed below)",
    )
    dtype: str = setting("auto", help="float32 | bfloat16 | float16 (auto: float32 on CPU, bf16 on CUDA)")
    device: str = setting("auto", help="cpu | cuda | cuda:N | auto")


@dataclass(frozen=True, kw_only=True)
class Loading:
    nope: bool | None = setting(
        None, help="remove rotary position embedding (NoPE); default: as the checkpoint declares"
    )
    rope_scaling: str | None = setting(
        None,
        metavar="TYPE:FACTOR",
        help="scale the checkpoint's RoPE: dynamic:2 (HF dynamic NTK, the paper's RoPE-NTK), linear:F, yarn:F",
    )
    train_len: int | None = setting(
        None,
        at_least=1,
        at_most=MAX_TOKENS,
        help="the model's training length L (default: what its config declares)",
    )
    trust_remote_code: bool = setting(False, help="allow a checkpoint's own Python code")
    revision: str | None = setting(None, help="branch, tag or commit of a Hub id (org/name); default main")


@dataclass(frozen=True, kw_only=True)
class Text:
    data: str = setting(
        "austen",
        help="austen | austen:<novel> | austen-minus:<novel> | stdlib | a .txt file, folder of .txt, "
        ".jsonl with a 'text' field, or .npy token ids [N, len+1]",
    )
    seed: int = setting(0, at_least=0, at_most=MAX_SEED, help="which chunks (or windows) are drawn")


@dataclass(frozen=True, kw_only=True)
class Windows:
    samples: int = setting(8, at_least=1, at_most=MAX_COUNT, help="packed chunks to average over")
    batch_size: int = setting(1, at_least=1, at_most=MAX_COUNT, help="sequences per forward pass")
    stride: int | None = setting(
        None,
        at_least=1,
        at_most=MAX_TOKENS,
        metavar="S",
        help="draw overlapping windows of len+1 tokens starting every S tokens instead of "
        "non-overlapping chunks (sliding-window perplexity; see `entropy-lens ppl`)",
    )
    context_parallel: bool | int = setting(  # False: off; True (the flag alone, old files): C = all ranks
        False,
        metavar="C",
        at_least=2,
        at_most=MAX_COUNT,
        help="under torchrun: shard each window over all the processes (the flag alone), or over groups of "
        "C consecutive processes that split the windows (C divides the process count; docs/scaling.md)",
    )


@dataclass(frozen=True, kw_only=True)
class Slicing:
    # the row-slice statistics' parameters, each a flag as its declaration says (statistics.SLICE_PARAMETERS)
    spans: str | None = SPANS.setting()
    offsets: str | None = OFFSETS.setting()
    distance_bins: str | None = DISTANCE_BINS.setting()

    def parsed_spans(self) -> dict[str, tuple[int, int]] | None:
        """--spans "doc=0:200,needle=410:420" as {name: (start, stop)} (None: not given); one line for
        another form or a name given twice."""
        if self.spans is None:
            return None
        spans = {}
        for part in filter(None, self.spans.split(",")):
            name, _, bounds = part.partition("=")
            start, colon, stop = bounds.partition(":")
            if not colon:
                raise EntropyLensError(f"--spans: {part!r} is not NAME=START:STOP; write e.g. doc=0:200")
            name = name.strip()
            if name in spans:
                first = "{}={}:{}".format(name, *spans[name])
                raise EntropyLensError(
                    f"--spans: the name {name!r} is given twice ({first} and {part.strip()}); "
                    "give each span a name of its own"
                )
            spans[name] = _whole_numbers("--spans", f"{start},{stop}")
        return spans

    def parsed_slicing(self) -> dict:
        """The row-slice statistics' parameters given by flag (statistics.SLICE_PARAMETERS that are a field
        of the config: --spans, --offsets, ..., generate's --top-keys), parsed: {name: value}
        of those given; one line for another form."""
        from entropy_lens.statistics import SLICE_PARAMETERS

        out = {}
        for name, p in SLICE_PARAMETERS.items():
            value = getattr(self, name, None)
            if value is None or value == p.default:
                continue
            if name == "spans":
                out[name] = self.parsed_spans()
            else:
                out[name] = _whole_numbers(p.flag, value) if isinstance(value, str) else value
        return out

    def check_slicing(self, sliced: tuple[str, ...], *, spans_needed: bool) -> None:
        """EntropyLensError in one line, naming the flags, for a row-slice statistic's flag (--spans,
        --offsets, ..., --top-keys) without the statistic that reads it, or that statistic
        without the flag it needs, each as its declaration says (statistics.ROW_SLICE_STATISTICS).

        Args:
            sliced: the row-slice statistics --stats names (flags.split_slices).
            spans_needed: whether a statistic with built-in slots needs its flag anyway (a scan's spans
                need --spans; generate records its prompt and generated spans).
        """
        from entropy_lens.statistics import ROW_SLICE_STATISTICS

        given = self.parsed_slicing()
        for stat in ROW_SLICE_STATISTICS.values():
            p = stat.sliced
            if p.name in given and stat.name not in sliced:
                raise EntropyLensError(
                    f"{p.flag} is read by {stat.name}: add it to --stats, or leave {p.flag} out"
                )
            needed = p.needs is not None and (spans_needed or not p.built_in)
            if p.name not in given and stat.name in sliced and needed:
                raise EntropyLensError(f"--stats {stat.name} needs {p.flag}, e.g. {p.flag} {p.example}")


SLICING = tuple(f.name for f in fields(Slicing))  # its fields: the flags of the row-slice statistics


def _whole_numbers(flag: str, text: str) -> tuple[int, ...]:
    """--offsets "0,1" as (0, 1); one line for another form."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise EntropyLensError(f"{flag}: {text!r} holds what is not a whole number; write e.g. 0,1") from None


@dataclass(frozen=True, kw_only=True)
class PositionScaling:
    scale_schedule: str | None = setting(
        None,
        metavar="KIND:X",
        help="query-position multipliers on top of the scales: piecewise:S (S beyond the training "
        "length L), log:A (1 + A ln(i/L) beyond it; the paper's section 2.4), or a published schedule: "
        "llama4[:A,F] (Llama 4's NoPE layers), qwen-logn (Qwen's logn), yarn[:C] (YaRN's factor, per position)",
    )


@dataclass(frozen=True, kw_only=True)
class Scaling(PositionScaling):
    scale: float | None = setting(
        None, **settings.SCALE, help="uniform attention scale multiplier s: λ = s/√d for every head"
    )
    head_scales: str | None = setting(
        None, metavar="F", help="per-head multipliers [layers, heads]: .safetensors/.npy/.json"
    )

    def check_scaling(self) -> None:
        """EntropyLensError in one line for --scale with --head-scales, a missing --head-scales file or
        a --scale-schedule that does not parse."""
        from entropy_lens.capture import parse_schedule

        if self.scale is not None and self.head_scales is not None:
            raise EntropyLensError("--scale and --head-scales both given; pass one of them")
        if self.head_scales is not None and not Path(self.head_scales).is_file():
            raise EntropyLensError(
                f"--head-scales file {self.head_scales} does not exist; pass a .safetensors, "
                ".npy or .json file of shape [layers, heads]"
            )
        parse_schedule(self.scale_schedule)


# fields of the groups that change a run's numbers (every config's cache key holds them; the device too,
# as --dtype auto is bfloat16 on CUDA)
# the fields of the groups that change a run's numbers: every config's cache KEY starts with them
LOADED_KEY = (
    "model",
    "dtype",
    "device",
    "nope",
    "rope_scaling",
    "train_len",
    "trust_remote_code",
    "revision",
)
SCALED_KEY = ("scale", "head_scales", "scale_schedule")


STRIDE_FRACTION = 8  # ppl's default stride S = L / 8: the paper's 256 of L = 2048
VARIANTS = ("scale", "head_scales", "rope_scaling")  # ppl and passkey take one variant of the model at most


SWEEP_ENTROPY = "mean"  # `entropy-lens sweep`'s own default --record: its files are ~1/heads the size


@dataclass(frozen=True, kw_only=True)
class ScanConfig(Checked, Recorded, Checkpoint, Loading, Text, Windows, Scaling, Slicing):
    """Everything that determines a scan's numbers (saved in the results' meta)."""

    # the cache key (settings.Recorded: what changes the numbers; a new such field bumps KEY_VERSION)
    KEY_VERSION: ClassVar[int] = 1
    KEY: ClassVar[tuple[str, ...]] = (*LOADED_KEY, "data", "seed", "samples", "stride", *SCALED_KEY, "length")
    KEY += ("entropy", "stats", *PARAMETERS, *SLICING)  # the statistics and their parameters
    NOT_KEY: ClassVar[tuple[str, ...]] = ("batch_size", "context_parallel", "backend", "fused")
    length: int = setting(
        flag="--len", at_least=2, at_most=MAX_TOKENS, help="tokens per sequence (model input length)"
    )
    backend: str = setting(
        "auto",
        help="the kernel of the statistics: auto (triton on CUDA; on CPU torch_chunked, and the native C++ "
        f"kernel for the fused pass where it builds) | {' | '.join(BACKENDS)}",
    )
    fused: str = setting(
        "auto",
        choices=FUSED_MODES,
        help="layer output + entropy in one fused pass (on; Triton on CUDA, on CPU the native C++ kernel, "
        "or the streamed torch path where it cannot build: the meta's native says why), sdpa + an "
        "entropy pass (off), or whichever is faster, timed on the first layers (auto)",
    )
    entropy: str = setting(  # named for the meta's entropy_reduction; its flag for what it does
        "heads",
        flag="--record",
        aliases=("--entropy",),
        choices=ENTROPY_REDUCTIONS,
        help="what the scan records of entropy and every statistic of --stats: each head's (heads), the "
        "mean over each layer's heads (mean), or nothing: a loss-only scan (none)",
    )
    stats: str = setting(
        ENTROPY.name,
        help="the statistics to record beside entropy, comma-separated, or all: the row statistics "
        + ", ".join(EXTRA_STATS)
        + f" ({SINK_MASS.name} is recorded wherever a model has sinks) and the key statistics (attention "
        "received by each key, by key position) " + ", ".join(KEY_STATISTICS) + " (entropy_lens/statistics/)",
    )
    # the statistics' parameters, each a field and a flag as its declaration says (statistics.PARAMETERS)
    first_keys: int = FIRST_KEYS.setting()
    recent_keys: int = RECENT_KEYS.setting()
    query_window: int | None = QUERY_WINDOW.setting()

    def cache_key(self) -> dict:
        """settings.Recorded's, without a parameter at its default unless declared keyed there
        (`Parameter.keyed_at_default`: the numbers of scans made before the field existed), so their
        cached runs keep their keys."""
        key = super().cache_key()
        for name, parameter in PARAMETERS.items():
            if not parameter.keyed_at_default and key[name] == parameter.default:
                del key[name]
        for name in SLICING:  # the row-slice statistics' (--spans, --offsets, ...), where given
            if key[name] is None:
                del key[name]
        return key

    @functools.cached_property
    def measure(self) -> Measure:
        """What to measure, parsed once per config (entropy_lens/flags.py): what the capture takes. Its
        `stats`: entropy, sink mass (models with sinks) and the row statistics of --stats; its key_stats
        those of --stats; the parameters, --backend and --fused."""
        rows, keys, sliced = self._split_stats
        self.check_slicing(sliced, spans_needed=True)
        stats = Stats((*DEFAULT_STATS, *(name for name in parse_stats(rows) if name not in DEFAULT_STATS)))
        params = {name: getattr(self, name) for name in PARAMETERS}
        slices = {"slices": sliced, **self.parsed_slicing()}
        try:
            return Measure.parse(
                backend=self.backend, fused=self.fused, stats=stats, key_stats=keys, **slices, **params
            )
        except ValueError as err:  # a span or an offset out of range
            raise EntropyLensError(f"--stats: {err}") from None

    @functools.cached_property
    def _split_stats(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """(row statistics, key statistics, row-slice statistics) of --stats."""
        others, sliced = split_slices(self.stats)
        try:
            rows, keys = parse_stats(others or (ENTROPY.name,), None)
        except ValueError as err:
            raise EntropyLensError(f"--stats: {err}") from None
        return rows, keys, sliced

    def check(self) -> None:
        """EntropyLensError in one line for settings that cannot run (the length, the stride, --record,
        the scaling, the statistics and --query-window), before anything loads."""
        from entropy_lens.data import check_length
        from entropy_lens.data.chunks import check_stride

        check_length(self.length)
        check_stride(self.stride)
        if self.stride is not None and self.stride > self.length:
            raise EntropyLensError(
                f"--stride {self.stride} exceeds --len {self.length}: windows would skip the tokens "
                f"between them; pass --stride {self.length} or less"
            )
        if self.entropy not in ENTROPY_REDUCTIONS:
            raise EntropyLensError(f"--record {self.entropy!r} is not known; use heads, mean or none")
        self.check_scaling()
        measure = self.measure  # unknown names fail here, before loading anything
        if (measure.stats[len(DEFAULT_STATS) :] or measure.key_stats) and self.entropy == "none":
            raise EntropyLensError(f"--stats {self.stats} needs --record heads or mean, not none")
        if self.query_window is not None and not measure.key_stats:
            raise EntropyLensError(
                f"--query-window {self.query_window} counts rows for the key statistics; add one to --stats "
                f"(e.g. --stats {','.join(KEY_STATISTICS)})"
            )


@dataclass(frozen=True, kw_only=True)
class PerplexityConfig(Checked, Checkpoint, Loading, Text, Windows, Scaling):
    """Everything that determines a sliding-window perplexity table for one model (lengths in tokens):
    one loss-only ScanConfig per window length (`scan_config`), every shared field passed on."""

    lengths: tuple[int, ...] = setting(
        flag="--lens",
        metavar="W",
        type=int,
        nargs="+",
        at_least=2,
        at_most=MAX_TOKENS,
        help="window lengths in tokens, ascending (the paper: 1L 2L 4L 8L)",
    )
    # the same fields as a scan's, with the meaning and defaults of windows
    samples: int = setting(256, at_least=1, at_most=MAX_COUNT, help="windows per length")
    data: str = setting("austen:persuasion", help="as for scan")
    stride: int | None = setting(
        None,
        at_least=1,
        at_most=MAX_TOKENS,
        metavar="S",
        help="tokens between window starts, and tokens scored per window (default: L/8 of the model's "
        "training length L, the paper's 256 at L = 2048)",
    )

    def __post_init__(self):
        super().__post_init__()  # types and ranges first: then every length is a whole number
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
        from entropy_lens.models import declared_train_len

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
        variants = [f"--{k.replace('_', '-')}" for k in VARIANTS if getattr(self, k)]
        if len(variants) > 1:
            raise EntropyLensError(f"{' and '.join(variants)} both given; pass one variant per table row")
        if self.stride is not None and self.lengths[0] <= self.stride:
            raise EntropyLensError(
                f"--lens {self.lengths[0]} is not longer than --stride {self.stride}: a window must hold "
                f"context before its {self.stride} scored tokens; pass lengths above {self.stride} or a "
                "smaller --stride"
            )
        for length in self.lengths:
            self.scan_config(length).check()


@dataclass(frozen=True, kw_only=True)
class HeadSearchConfig(Checked, Recorded, Checkpoint, Loading, Text, PositionScaling):
    """The settings of the per-head scale search (training/head_search.py): λ(h) learnt on the checkpoint as
    its loading flags give it, under a position schedule when one is given."""

    # the cache key (settings.Recorded): the gradient's accumulation and memory stay out
    KEY_VERSION: ClassVar[int] = 1
    KEY: ClassVar[tuple[str, ...]] = (
        *LOADED_KEY,
        "data",
        "seed",
        "scale_schedule",
        "length",
        "init",
        "steps",
    )
    KEY += ("lr", "batch", "lower_bound")
    NOT_KEY: ClassVar[tuple[str, ...]] = ("micro_batch", "checkpointing", "chunk")

    length: int = setting(flag="--len", at_least=2, at_most=MAX_TOKENS, help="L', tokens per training window")
    init: float = setting(
        1.0, cli=False, above=0, help="initial multiplier of every head (the best uniform scale for L')"
    )
    steps: int = setting(200, at_least=1, at_most=MAX_COUNT, help="optimiser steps")
    lr: float = setting(0.1, above=0, help="AdamW learning rate (after a warm-up, cosine decay to 0.1x)")
    batch: int = setting(8, at_least=1, at_most=MAX_COUNT, help="windows per optimiser step")
    micro_batch: int = setting(
        1, at_least=1, at_most=MAX_COUNT, help="windows per forward pass (gradients accumulated)"
    )
    lower_bound: float = setting(
        1.0, at_least=0, help="smallest multiplier a head may take (1: the focus constraint λ(h) >= 1/√d)"
    )
    checkpointing: bool = setting(False, help="activation checkpointing (long --len on GPU)")
    chunk: int = setting(
        1024, at_least=1, at_most=MAX_TOKENS, help="positions of logits per loss chunk (memory)"
    )

    def check(self) -> None:
        from entropy_lens.data import check_length

        check_length(self.length)
        if self.batch % self.micro_batch:
            raise EntropyLensError(
                f"--batch {self.batch} must be a multiple of --micro-batch {self.micro_batch}"
            )
        if self.init < self.lower_bound:
            raise EntropyLensError(
                f"--init {self.init} must be at least --lower-bound {self.lower_bound}; pass a larger --init "
                "or a smaller --lower-bound"
            )
        from entropy_lens.capture import parse_schedule

        parse_schedule(self.scale_schedule)


@dataclass(frozen=True, kw_only=True)
class PasskeyConfig(Checked, Recorded, Checkpoint, Loading, Scaling):
    """Everything that determines a passkey-retrieval table (runs/passkey.py): for each window length,
    `depths` needle depths × `keys` random keys, seeded per trial. The lengths' ceiling (MAX_TOKENS)
    bounds the prompt before one is built; depths and keys are at most PASSKEY_MOST each (a hundred times
    the paper's 10: a million trials per length)."""

    lengths: tuple[int, ...] = setting(
        flag="--lens",
        metavar="W",
        type=int,
        nargs="+",
        at_least=1,
        at_most=MAX_TOKENS,
        help="window lengths in tokens, ascending",
    )
    depths: int = setting(
        10,
        at_least=1,
        at_most=PASSKEY_MOST,
        help="needle depths 0, 1/N, ..., (N-1)/N of the filler (the paper: 10)",
    )
    keys: int = setting(
        10, at_least=1, at_most=PASSKEY_MOST, help="random 5-digit keys per depth and length (the paper: 10)"
    )
    seed: int = setting(
        42,
        at_least=0,
        at_most=MAX_SEED,
        help="seeds each trial's key and needle position (with its length, depth, index)",
    )

    # the cache key (settings.Recorded): every field changes the table
    KEY_VERSION: ClassVar[int] = 1
    KEY: ClassVar[tuple[str, ...]] = (*LOADED_KEY, *SCALED_KEY, "lengths", "depths", "keys", "seed")

    def __post_init__(self):
        super().__post_init__()  # types and ranges first: then every length is a whole number
        object.__setattr__(self, "lengths", tuple(operator.index(w) for w in self.lengths))

    def to_dict(self) -> dict:
        """The fields as a plain dict, `lengths` a list (what a results file records of the config)."""
        return {**super().to_dict(), "lengths": list(self.lengths)}

    def check(self) -> None:
        """EntropyLensError in one line unless the lengths are given once each, ascending, and the
        scaling is valid."""
        if not self.lengths or any(b <= a for a, b in zip(self.lengths, self.lengths[1:])):
            raise EntropyLensError(
                f"--lens {' '.join(map(str, self.lengths)) or '(none)'}: pass window lengths once each, "
                f"ascending, e.g. --lens {' '.join(map(str, sorted(set(self.lengths)) or [128, 256]))}"
            )
        self.check_scaling()


settings.documented(ScanConfig, PerplexityConfig, HeadSearchConfig, PasskeyConfig)  # Args: each --help
