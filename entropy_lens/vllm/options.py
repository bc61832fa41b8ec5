"""What one vLLM request asks the lens for, in the flat spelling both `SamplingParams(extra_args=...)` and
the OpenAI server's `extra_body={"vllm_xargs": ...}` carry (vLLM 0.32's xargs take str, int, float or
lists of them, no nested dicts). ::

    request(stats=("entropy", "max_prob"), prompt=True)
        -> {"entropy_lens.stats": "entropy,max_prob", "entropy_lens.prompt": 1}
    options_of(extra_args) -> RequestOptions, or None for a request that did not opt in

Every key starts with `entropy_lens.`; `stats` names row statistics (the kernels' and the row-slice ones),
`spans` span_mass's spans as "name:start:stop" strings, `prompt` 1 to record the prompt's rows too, and
any other key a statistic's parameter (statistics.PARAMETERS, SLICE_PARAMETERS: `entropy_lens.first_keys`,
`entropy_lens.offsets`, `entropy_lens.distance_bins` as lists). Parsed by `flags.Measure.parse`, as
GenerationRecorder's, so a request is refused in one line when it is made, not in the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure, split_slices
from entropy_lens.statistics import ENTROPY

PREFIX = "entropy_lens."
KEY = "entropy_lens"  # the engine's additional_config key: {"out": the folder}
PARTS = ".parts"  # DIR/.parts/<internal request id>/rank<r>.npz: each rank's rows (worker.py)
ABORTED = "aborted"  # DIR/.parts/<internal request id>/aborted: the front end's tombstone (frontend.py)
__all__ = ["ABORTED", "KEY", "PARTS", "PREFIX", "RequestOptions", "options_of", "request"]


@dataclass(frozen=True)
class RequestOptions:
    """One request's statistics: `measure` (the kernels' row statistics and every parameter; its `slices`
    the row-slice statistics per generated token), `stats` (the kernels' statistics to record: those
    named, entropy where none is) and `prompt` (record the prompt's rows too)."""

    measure: Measure
    stats: tuple[str, ...]
    prompt: bool


def request(stats=(ENTROPY.name,), *, spans=None, offsets=(), top_keys=1, prompt=False, **parameters) -> dict:
    """The `extra_args` of a vLLM request that records its attention statistics (module docstring).

    Args:
        stats: row statistics (a name, comma-separated names or a sequence): the kernels'
            (entropy_lens.statistics.STATISTICS) and the row-slice ones (ROW_SLICE_STATISTICS).
        spans: span_mass's spans besides "prompt" and "generated": {name: (start, stop)}, positions.
        offsets: offset_prob's offsets d >= 0.
        top_keys: top_key's k.
        prompt: also record every prompt row (`result.prompt_stat(name)`).
        **parameters: the statistics' other parameters by name (statistics.PARAMETERS, SLICE_PARAMETERS:
            `first_keys=8`, `distance_bins=(0, 16, 256)`).

    Returns:
        dict: flat keys for `SamplingParams(extra_args=...)` or the server's `vllm_xargs`.

    Raises:
        EntropyLensError: as GenerationRecorder refuses the same arguments (TypeError for an unknown
            keyword).
    """
    names = stats.split(",") if isinstance(stats, str) else list(stats)
    flat = {PREFIX + "stats": ",".join(names)}
    if spans:
        flat[PREFIX + "spans"] = [f"{name}:{a}:{b}" for name, (a, b) in dict(spans).items()]
    if offsets:
        flat[PREFIX + "offsets"] = [int(d) for d in offsets]
    if top_keys != 1:
        flat[PREFIX + "top_keys"] = top_keys
    if prompt:
        flat[PREFIX + "prompt"] = 1
    flat.update({PREFIX + name: list(v) if isinstance(v, tuple) else v for name, v in parameters.items()})
    options_of(flat)  # refused here, when the request is made
    return flat


def options_of(extra_args) -> RequestOptions | None:
    """The RequestOptions of a request's extra_args; None where no key starts with `entropy_lens.`.

    Raises:
        EntropyLensError: a value out of range or a key statistic, in one line.
        TypeError: an unknown key.
    """
    if not extra_args:
        return None
    ours = {k[len(PREFIX) :]: v for k, v in extra_args.items() if isinstance(k, str) and k.startswith(PREFIX)}
    if not ours:
        return None
    rest, sliced = split_slices(ours.pop("stats", ENTROPY.name))
    prompt = ours.pop("prompt", 0)
    if prompt not in (0, 1, True, False):
        raise EntropyLensError(f"entropy_lens.prompt={prompt!r}: give 1 (record the prompt's rows) or 0")
    if "spans" in ours:
        ours["spans"] = _spans(ours["spans"])
    for name in ("offsets", "distance_bins"):  # the flat spelling's lists, as the parsers take tuples
        if isinstance(ours.get(name), list):
            ours[name] = tuple(ours[name])
    measure = Measure.parse(stats=rest or (ENTROPY.name,), slices=sliced, per_token=True, **ours)
    if measure.key_stats:
        raise EntropyLensError(
            f"{', '.join(measure.key_stats)} is a key statistic; a vLLM request records row statistics"
        )
    return RequestOptions(measure, tuple(measure.stats) if rest or not sliced else (), bool(prompt))


def _spans(spans) -> dict | None:
    """span_mass's spans from their flat spelling ("name:start:stop" strings), or a dict as given."""
    if spans is None or isinstance(spans, dict):
        return spans
    out = {}
    for text in [spans] if isinstance(spans, str) else spans:
        parts = str(text).split(":")
        if len(parts) != 3 or not parts[1].lstrip("-").isdigit() or not parts[2].lstrip("-").isdigit():
            raise EntropyLensError(f"entropy_lens.spans: {text!r} is not name:start:stop, e.g. doc:0:900")
        out[parts[0]] = (int(parts[1]), int(parts[2]))
    return out
