"""The groups of settings the run configs share (runs/configs.py composes them), each setting declared once
(`entropy_lens.settings.setting`: its type, default and help):

    Checkpoint   model, dtype, device                                 every command
    Loading      nope, rope_scaling, train_len, trust_remote_code, revision
    Text         data, seed
    Windows      samples, batch_size, stride, context_parallel (how each window is run)
    Slicing      the row-slice statistics' parameters: spans, offsets, ... (scan, generate)
    PositionScaling, Scaling   rope_scaling; scale, head_scales, scale_schedule: the variants of the
                 attention scale

No torch at import, as runs/configs.py.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from entropy_lens import settings
from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import MAX_COUNT, MAX_SEED, MAX_TOKENS, setting
from entropy_lens.statistics import DISTANCE_BINS, OFFSETS, SPANS

__all__ = [
    "LOADED_KEY",
    "SCALED_KEY",
    "Checkpoint",
    "Loading",
    "PositionScaling",
    "Scaling",
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
