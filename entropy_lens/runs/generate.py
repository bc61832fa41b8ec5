"""`entropy-lens generate`: a model writes after a prompt, and the row statistics of every token it writes
are recorded (entropy_lens.generation.GenerationRecorder) into one .npz (results/generation.py), with a
summary per layer and head, and each token's text where the model has a tokenizer (meta token_texts,
what `entropy-lens view` shows). ::

    config = GenerateConfig(model="tiny-nope", prompt_file="prompt.txt", max_new_tokens=32)
    result = generate(config, out="gen.npz")      # GenerationResult; --out checked before the model loads

The prompt is a text file (`--prompt-file`) or the first `--prompt-len` tokens of a text source
(`--data`, as scan reads it). Greedy by default; `--sample` draws with `--seed`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import ALL, BACKENDS, FUSED_MODES, Measure, require, split_slices
from entropy_lens.results import check_regular_source, printable
from entropy_lens.runs.configs import Checkpoint, Loading, Slicing
from entropy_lens.runs.output import check_replaceable, say
from entropy_lens.settings import MAX_COUNT, MAX_SEED, MAX_TOKENS, Checked, documented, setting
from entropy_lens.statistics import (
    DEFAULT_STATS,
    ENTROPY,
    FIRST_KEYS,
    RECENT_KEYS,
    ROW_PARAMETERS,
    ROW_SLICE_STATISTICS,
    STATISTICS,
    TOP_KEY,
)

if TYPE_CHECKING:  # torch-free at import: `entropy-lens generate --help` loads none
    from entropy_lens.generation import GenerationResult

__all__ = ["GenerateConfig", "generate", "head_summary"]


@dataclass(frozen=True, kw_only=True)
class GenerateConfig(Checked, Checkpoint, Loading, Slicing):
    """What `entropy-lens generate` writes after and records."""

    prompt_file: str | None = setting(None, metavar="F", help="a text file: the prompt")
    data: str | None = setting(
        None, help="or a text source, as scan's --data: its first --prompt-len tokens are the prompt"
    )
    prompt_len: int = setting(256, at_least=1, at_most=MAX_TOKENS, help="tokens of --data in the prompt")
    max_new_tokens: int = setting(32, at_least=1, at_most=MAX_COUNT, help="tokens to generate")
    sample: bool = setting(False, help="sample (with --seed) instead of greedy decoding")
    seed: int = setting(0, at_least=0, at_most=MAX_SEED, help="the sampling seed")
    stats: str = setting(
        ENTROPY.name,
        help="row statistics per generated token, comma-separated, or all (the kernels'): "
        + ", ".join([*STATISTICS, *ROW_SLICE_STATISTICS]),
    )
    top_keys: int = setting(1, at_least=1, at_most=MAX_COUNT, help="top_key's k: the k most probable keys")
    backend: str = setting("auto", help=f"the kernel of the statistics: auto | {' | '.join(BACKENDS)}")
    fused: str = setting("auto", choices=FUSED_MODES, help="as scan's --fused")
    first_keys: int = FIRST_KEYS.setting()
    recent_keys: int = RECENT_KEYS.setting()

    def check(self) -> None:
        """EntropyLensError in one line for a prompt given twice or not at all, a prompt file that is
        not there, or statistics that are not row statistics, before anything loads."""
        if (self.prompt_file is None) == (self.data is None):
            raise EntropyLensError(
                "give the prompt as --prompt-file F or as --data D (its first --prompt-len tokens)"
            )
        if self.prompt_file is not None:
            self.prompt_text()
        require(measure=self.measure)  # parsed here, before anything loads

    def prompt_text(self) -> str:
        """The text of --prompt-file; EntropyLensError in one line for a path that is no file or a file
        that is not UTF-8 text."""
        path = check_regular_source(
            self.prompt_file, label=f"--prompt-file {self.prompt_file}", fix="pass a text file"
        )
        try:
            return path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise EntropyLensError(
                f"--prompt-file {printable(self.prompt_file)} is not UTF-8 text (byte "
                f"0x{err.object[err.start]:02x} at offset {err.start}); save it as UTF-8 "
                "(e.g. iconv -f latin1 -t utf-8)"
            ) from None
        except OSError as err:
            raise EntropyLensError(
                f"--prompt-file {printable(self.prompt_file)}: cannot read it ({err.strerror or err}); "
                "pass a readable text file"
            ) from None

    def input_files(self) -> dict[str, str]:
        """{flag: path} of the files the run reads (--prompt-file, a --data file): an --out that is one
        of them is refused (`check_replaceable`)."""
        given = {"--prompt-file": self.prompt_file, "--data": self.data}
        return {flag: path for flag, path in given.items() if path is not None and Path(path).is_file()}

    @functools.cached_property
    def measure(self) -> Measure:
        """What GenerationRecorder records, parsed once per config (flags.Measure, per generated token):
        the statistics of --stats, the row-slice statistics' parameters of --spans, --offsets,
        ... and --top-keys (statistics.SLICE_PARAMETERS), the kernel statistics' parameters, --backend and
        --fused;
        EntropyLensError in one line naming the flag."""
        stats = tuple(STATISTICS) if self.stats == ALL else tuple(filter(None, self.stats.split(",")))
        rest, sliced = split_slices(stats)
        self.check_slicing(sliced, spans_needed=False)
        params = {name: getattr(self, name) for name in ROW_PARAMETERS}
        try:
            return Measure.parse(
                stats=rest or DEFAULT_STATS,
                slices=sliced,
                per_token=True,
                backend=self.backend,
                fused=self.fused,
                **self.parsed_slicing(),
                **params,
            )
        except ValueError as err:
            raise EntropyLensError(f"--stats: {err}") from None


documented(GenerateConfig)


def generate(config: GenerateConfig, *, out: str | None = None, force: bool = False) -> GenerationResult:
    """Load the model, write `max_new_tokens` after the prompt, and return (and save to `out`) the
    statistics of every generated token. `out` is checked first, before torch and transformers are
    imported and the model loads (an existing file is replaced only with `force`): a refusal in a second."""
    if out is not None:
        check_replaceable(out, force=force, inputs=config.input_files(), example="generation.npz")
    config.check()
    import torch

    from entropy_lens.generation import GenerationRecorder
    from entropy_lens.models import resolve_device, resolve_dtype
    from entropy_lens.runs.provenance import model_facts
    from entropy_lens.runs.variants import load_variant

    device = resolve_device(config.device)
    lm = load_variant(config, device, resolve_dtype(config.dtype, device))
    ids = _prompt_ids(config, lm.tokenizer)[None].to(device)
    config = _top_keys_seen(config, ids.shape[-1])
    kw = {"do_sample": config.sample, "max_new_tokens": config.max_new_tokens}
    if lm.tokenizer is not None and lm.tokenizer.pad_token_id is None:
        kw["pad_token_id"] = lm.tokenizer.eos_token_id
    torch.manual_seed(config.seed)
    recorder = GenerationRecorder(lm.model, measure=config.measure)
    with recorder as rec, torch.no_grad(), past_positions_said(lm.model, config, ids.shape[1]):
        lm.model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    result = rec.result()
    texts = (
        []
        if lm.tokenizer is None
        else [lm.tokenizer.decode(t[:n].tolist()) for t, n in zip(result.tokens, result.lengths, strict=True)]
    )
    # the model as scans name it: as given, its source portable (a bundled model's place among the packages)
    facts = {"model": config.model, **model_facts(lm, out)}
    meta = {**result.meta, **facts, "texts": texts, "generate_config": dataclasses.asdict(config)}
    result = dataclasses.replace(result, meta=meta)
    if lm.tokenizer is not None:  # each token's text, for entropy-lens view
        result = result.with_token_texts(lm.tokenizer)
    if out is not None:
        result.save(out)
    return result


@contextlib.contextmanager
def past_positions_said(model, config: GenerateConfig, prompt_len: int):
    """Inside the block, a generation that runs past the model's max_position_embeddings is said once, in
    our words (measuring attention there is what the command is for), and transformers' reminder of it
    ("This is a friendly reminder ... exceeded the model's predefined maximum length") is held back."""
    import logging

    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    total = prompt_len + config.max_new_tokens
    if limit is None or total <= limit:
        yield
        return
    print(
        f"{config.model}: the prompt's {prompt_len} tokens and {config.max_new_tokens} new ones run past its "
        f"max_position_embeddings ({limit}): what a generation's attention does there is what this measures",
        file=sys.stderr,
        flush=True,
    )
    reminder = logging.getLogger("transformers.generation.stopping_criteria")
    quiet = _WithoutReminder()
    reminder.addFilter(quiet)
    try:
        yield
    finally:
        reminder.removeFilter(quiet)


class _WithoutReminder:
    """A logging filter: drops transformers' "exceeded the model's predefined maximum length" reminder."""

    def filter(self, record) -> bool:
        return "predefined maximum length" not in record.getMessage()


def _prompt_ids(config: GenerateConfig, tokenizer):
    import torch

    from entropy_lens.data import token_chunks

    if config.prompt_file is not None:
        if tokenizer is None:
            raise EntropyLensError(
                f"{config.model} has no tokenizer for --prompt-file; use --data with token ids"
            )
        text = config.prompt_text()
        ids = tokenizer(text, return_tensors="pt").input_ids[0]
        if ids.numel() == 0:
            raise EntropyLensError(
                f"--prompt-file {config.prompt_file} holds no tokens; write a prompt into it"
            )
        return ids
    chunks = token_chunks(tokenizer, config.data, length=config.prompt_len, samples=1, seed=0)
    return torch.from_numpy(chunks.ids[0, : config.prompt_len])


def _top_keys_seen(config: GenerateConfig, prompt_len: int) -> GenerateConfig:
    """`config` with --top-keys cut to the most keys a generated token's row sees (the prompt's and the
    tokens generated before the last: prompt_len + max_new_tokens − 1), said on stderr: more would be
    padding (−1) in every row."""
    seen = prompt_len + config.max_new_tokens - 1
    if config.top_keys <= seen:
        return config
    say(
        f"--top-keys {config.top_keys} cut to {seen}: the most keys a generated token's row sees "
        f"({prompt_len} prompt tokens + {config.max_new_tokens - 1} generated before the last)"
    )
    return dataclasses.replace(config, top_keys=seen)


def head_summary(result: GenerationResult) -> str:
    """The generated text (meta `texts`, where a tokenizer decoded it), then per layer: each recorded
    statistic's mean over the live generated tokens and the heads, and the heads with its lowest and
    highest mean; and the entropy of each generated token (mean over sequences, layers and heads)."""
    lines = [f"sequence {b}: {text!r}" for b, text in enumerate(result.meta.get("texts", []))]
    live = result.live
    for name in result.stats:
        if name in ROW_SLICE_STATISTICS:
            continue  # slice_summary's
        values = result.stat(name)[live].astype(np.float64)  # (tokens, layers, heads)
        per_head = values.mean(0)  # (layers, heads)
        lines.append(f"{name} ({STATISTICS[name].unit}), mean over {values.shape[0]} generated tokens:")
        for layer, heads in enumerate(per_head):
            low, high = int(heads.argmin()), int(heads.argmax())
            lines.append(
                f"  layer {layer:>2}: mean {heads.mean():.4f}, lowest head {low} ({heads[low]:.4f}), "
                f"highest head {high} ({heads[high]:.4f})"
            )
    if ENTROPY.name in result.stats and live.shape[1] > 1:
        by_step = np.nanmean(result.stat(ENTROPY.name).astype(np.float64), axis=(0, 2, 3))
        lines.append(
            f"entropy by generated token (mean over sequences, layers, heads): {np.round(by_step, 4).tolist()}"
        )
    return "\n".join([*lines, *slice_summary(result)])


def slice_summary(result: GenerationResult, top: int = 3) -> list[str]:
    """The heads that stand out by the row-slice statistics recorded, `top` each, their means over the
    live generated tokens: per slot of a row-slice statistic (each span, offset, distance bin) the heads
    with its largest mean (the prompt's span: which heads look back at the prompt), and by top_key the heads that copy: the share of generated tokens whose most probable key holds the very
    token written (Wu et al.'s retrieval heads)."""
    live, lines = result.live, []

    def heads(per_head: np.ndarray) -> str:  # (layers, heads) -> the `top` largest, as layer.head (value)
        order = np.argsort(-per_head, axis=None, kind="stable")[:top]
        return ", ".join(
            f"L{i // per_head.shape[1]}.H{i % per_head.shape[1]} ({per_head.flat[i]:.3f})" for i in order
        )

    for name in (n for n in result.stats if n in ROW_SLICE_STATISTICS):  # a slot per span, offset, bin
        mean = result.stat(name)[live].astype(np.float64).mean(0)  # (layers, heads, slots)
        words = ROW_SLICE_STATISTICS[name].sliced.slot
        for n, label in enumerate(result.slots(name)):
            lines.append(
                f"{name} {words.format(label)}: the heads with the largest mean: {heads(mean[..., n])}"
            )
    if TOP_KEY.name in result.stats and result.prompt is not None:
        first = result.stat(TOP_KEY.name)[..., 0]  # (B, N, layers, heads): each row's most probable key
        copied = result.ids_at(first) == result.tokens[:, :, None, None]
        share = copied[live].mean(0)
        lines.append(f"top_key copies the token written (share of generated tokens): {heads(share)}")
    return lines
