"""Attention while the model writes: the row statistics of every generated token, exact, inside
`model.generate()` or any decode loop with a KV cache, without T × T. ::

    with GenerationRecorder(model, stats=("entropy", "max_prob")) as rec:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=64)
    result = rec.result()            # GenerationResult: tokens (B, N), stat(name) (B, N, layers, heads)

    GenerationRecorder(model, stats=("entropy", "offset_prob", "top_key"), offsets=(0, 1), top_keys=3)
    result.stat("offset_prob")       # (B, N, layers, heads, offsets): result.slots("offset_prob") "0", "1"

The row of generated token n is the query whose logits chose it: the prompt's last position for n = 0,
the query of decode step n after. A generation's first forward feeds its prompt (generate may feed it in
chunks: `prefill_chunk_size`), and every forward after it one token: one step. Each layer's row
statistics come from the capture's kernels (the same numbers an EntropyRecorder takes), of which the
recorder keeps the last query row of each step: O(layers · heads) per step, on the host. The row-slice
statistics (statistics.ROW_SLICE_STATISTICS) come from the capture's slice pass on the same row pass's
log-sum-exp, for that last row alone (capture/slices.py): O(heads · keys) per layer and step, only where
asked for; keep_probs' block is read off the row's float64 probabilities (generation/rows.py). Positions are
real: each sequence's left padding is left out; a pre-allocated cache (StaticCache) is read as its
written slots (capture/call.py's `read_call`), so its keys sit where a growing cache's would.

Each generate() call inside the block is one generation (`results()`; `result()` the last). Tokens:
generate's output; in a decode loop of your own, the ids each step fed (the last token, never fed, is
−1 unless `result(sequences=...)` is given); a prompt given as inputs_embeds has unknown ids (−1). A
sequence ends with its end token (generation_config.eos_token_id): its later tokens are −1 and their
values NaN. Refused in one line: a decoding mode that feeds or reorders more than one row per step
(beam search, assisted and prompt-lookup decoding, contrastive search, DoLa: `one_row_per_step`),
right padding, a later batch of another size, a first forward on a cache the recorder did not see fill.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from transformers import LogitsProcessor

from entropy_lens import __version__
from entropy_lens.capture import ScaleSession
from entropy_lens.capture.probe import check_row_stats_apply
from entropy_lens.capture.recorder import fed_of, padding_mask
from entropy_lens.capture.reports import Reports
from entropy_lens.capture.scale_session import check_keywords
from entropy_lens.errors import EntropyLensError, index_ranges
from entropy_lens.flags import DEFAULT_ROWS, NO_SLICES, Measure, require, split_slices
from entropy_lens.generation.record import Generation, one_row_per_step, prompt_padding
from entropy_lens.generation.rows import KeptProbs
from entropy_lens.results.generation import PROBS, TOP_KEY_PROB, GenerationResult
from entropy_lens.statistics import ROW_SLICE_STATISTICS, SPANS, TOP_KEY

__all__ = ["GenerationRecorder"]


class GenerationRecorder(ScaleSession):
    """Record the row statistics of every generated token (module docstring).

    Args:
        model: a transformers causal LM that capture supports.
        stats: row statistics of entropy_lens.statistics.STATISTICS (the kernels'; default entropy,
            and sink_mass for a model with sinks) and of ROW_SLICE_STATISTICS (a row's mass on key spans,
            by offset, by distance, its top keys). Key statistics (attention received) are refused: a generated token's
            row is a row statistic.
        keep_probs: None, or ("generated", keys): keep each generated token's row's probabilities over a
            span's keys ("generated": the generated × generated block lm-polygraph's attention_all holds;
            "prompt", or one of `spans`), the result's `probs` (B, N, layers, heads, K).
        measure: None, or what to record parsed already (flags.Measure.parse(..., per_token=True): the
            command line's), in place of `stats` and the statistics' parameters.
        **options: ScaleSession's keywords, as EntropyRecorder takes them: `backend`, `fused`,
            `scales`, and the statistics' parameters by name: the kernels' (first_keys, ...) and the
            row-slice statistics' (statistics.SLICE_PARAMETERS): `spans` the key spans besides
            "prompt" and "generated", {name: (start, stop)} in real positions (a sequence's first real
            prompt token is 0); `offsets` offset_prob's d >= 0 (0: the row's own key); `top_keys`
            top_key's k, with their probabilities (top_key_prob); and the others of
            statistics.SLICE_PARAMETERS.

    Raises:
        EntropyLensError: an unknown or key statistic, a value out of range, a statistic asked for by
            name that some layer of the model does not report (sink_mass without attention sinks:
            refused here, by a probe forward, as AttentionMonitor refuses it).
    """

    def __init__(self, model, *, stats=None, keep_probs=None, measure: Measure | None = None, **options):
        check_keywords("GenerationRecorder", options)
        if measure is None:
            self.kept = KeptProbs.parse(keep_probs, options.get(SPANS.name))
            rest, sliced = split_slices(() if stats is None else stats)
            if self.kept is not None and not any(ROW_SLICE_STATISTICS[s].sliced is SPANS for s in sliced):
                options.pop(SPANS.name, None)  # spans= names keep_probs' keys alone
            super().__init__(model, stats=stats, per_token=True, **options)
        else:  # parsed by the caller (entropy-lens generate's GenerateConfig.measure): taken whole
            require(measure=measure)
            if measure.slices and not measure.slices.per_token:
                raise TypeError("GenerationRecorder(measure=...) takes Measure.parse(..., per_token=True)")
            asked = dict(measure.slices.values)
            spans = next((dict(v) for s, v in asked.items() if ROW_SLICE_STATISTICS[s].sliced is SPANS), None)
            self.kept = KeptProbs.parse(keep_probs, spans)
            rest = () if measure.stats == DEFAULT_ROWS else measure.stats  # named, unless the default
            super().__init__(model, stats=stats, measure=measure, **options)
        if self.session.measure.key_stats:
            raise EntropyLensError(
                f"GenerationRecorder records row statistics of each generated token; "
                f"{', '.join(self.session.measure.key_stats)} is a key statistic: record it with "
                "EntropyRecorder(model, stats=...) around generate()"
            )
        cfg = model.config.get_text_config()
        self.n_layers, self.n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
        if rest:  # asked for by name (the default's sink_mass is recorded where it applies)
            check_row_stats_apply(
                model,
                self.session.measure.replace(slices=NO_SLICES),  # the slice pass reports what it is asked
                n_layers=self.n_layers,
                drop="GenerationRecorder's stats (--stats)",
            )
        # each layer's row statistics; with keep_probs its last row, whole: its probabilities over its keys
        self.session.reports = _Steps(self, probe_rows=0 if self.kept is None else 1)
        self._generations: list[Generation] = []  # each generate() call, or a decode loop's forwards
        self._layers: dict[int, dict[str, torch.Tensor]] = {}  # this forward's last rows, by layer
        # the last forward's statistics, {name: (B, layers, heads[, values])} on the model's device: what
        # the step's logits processors read (`logits_processor`); None before any forward
        self.step: dict[str, torch.Tensor] | None = None
        self._outer = (None, None)  # the model's own forward's (2-D mask, ids), while it runs

    # -- installation -------------------------------------------------------------------------------
    def _install(self, stack: contextlib.ExitStack) -> None:
        super()._install(stack)  # its decoder hook, which reads the cache's length, first
        decoder = self.model.get_decoder()
        hooks = [
            decoder.register_forward_pre_hook(self._begin_forward, with_kwargs=True),
            decoder.register_forward_hook(self._end_forward),
            self.model.register_forward_pre_hook(self._outer_forward, with_kwargs=True),
            self.model.register_forward_hook(self._outer_done, always_call=True),
        ]
        for hook in hooks:
            stack.callback(hook.remove)
        stack.enter_context(self._wrapped_generate())

    @contextlib.contextmanager
    def _wrapped_generate(self):
        """`model.generate` inside the block: one generation per call (a decoding mode that feeds one row
        per step, else refused), its output's sequences kept."""
        model, own = self.model, self.model.__dict__.get("generate")
        original = model.generate

        def generate(*args, **kwargs):
            config = one_row_per_step(model, kwargs)
            prompt = kwargs.get("inputs_embeds")
            prompt = prompt if prompt is not None else kwargs.get("input_ids", kwargs.get("inputs"))
            prompt = prompt if prompt is not None or not args else args[0]
            generation = Generation(prompt_fed=prompt.shape[1] if isinstance(prompt, torch.Tensor) else None)
            generation.eos = (config.eos_token_id,)  # the end token generate stops on (None: none)
            self._generations.append(generation)
            out = original(*args, **kwargs)
            generation.sequences = out if isinstance(out, torch.Tensor) else out.sequences
            generation.closed = True
            return out

        model.generate = generate
        try:
            yield
        finally:
            if own is None:
                del model.generate
            else:
                model.generate = own

    def _outer_forward(self, module, args, kwargs):
        """The model's own forward: its 2-D mask and ids, where a wrapper (Gemma 3's) hands its decoder
        masks and embeddings of its own."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._outer = (
            padding_mask(kwargs.get("attention_mask")),
            ids if isinstance(ids, torch.Tensor) else None,
        )

    def _outer_done(self, module, args, output):
        self._outer = (None, None)

    def _begin_forward(self, module, args, kwargs):
        self.session.mask_memo.clear()
        self._layers = {}
        fed = fed_of(args, kwargs)
        if not isinstance(fed, torch.Tensor):
            raise EntropyLensError(
                f"{type(module).__name__} was called without input_ids or inputs_embeds inside the "
                "GenerationRecorder; call the model with either"
            )
        outer_mask, outer_ids = self._outer
        ids = fed if fed.ndim == 2 else outer_ids  # embeddings (B, T, D): the model's own ids, if any
        given = kwargs.get("attention_mask")
        mask = padding_mask(given)
        mask = mask if mask is not None else outer_mask
        generation = self._generations[-1] if self._generations else None
        if generation is None or generation.closed:  # a decode loop of your own: its first forward
            generation = Generation()
            self._generations.append(generation)
        B, T = fed.shape[:2]
        seen = self.session.cache_seen  # ScaleSession's hook, before this one (`_install`)
        if generation.fed_len == 0:
            if seen:
                raise EntropyLensError(
                    f"the GenerationRecorder's first forward continues a cache of {seen} tokens it did not "
                    "see; record from the prompt's first forward (an empty cache), or feed the whole prompt"
                )
            generation.begin(B, prompt_padding(mask if mask is not None else given, B, T))
        generation.feed(B, T, ids, mask, seen)
        self.session.padding_start = (generation.padding_on(fed.device), generation.fed_len)
        self.session.prompt_len = generation.prompt_len_on(fed.device)  # the built-in spans' border

    def _add(self, layer: int, values: dict, offset: int) -> None:
        """A layer's row statistics (B, Hq, T) and row-slice statistics (B, Hq, 1, n): its last row, the one
        whose logits choose the next token."""
        self._layers.setdefault(layer, {}).update({name: v[:, :, -1].detach() for name, v in values.items()})

    def _add_kept(self, layer: int, p: torch.Tensor) -> None:
        """A layer's last row, whole (p (B, Hq, 1, S) float64): keep_probs' block read off it. The S keys are the last S positions fed (a sliding-window layer's cache keeps its last W; a
        pre-allocated cache's slots are cut to those written: capture/call.py's `read_call`)."""
        generation = self._generations[-1]
        p = p[:, :, -1]
        S, fed_len = p.shape[-1], generation.fed_len
        padding = generation.padding_on(p.device)
        key_pos = torch.arange(fed_len - S, fed_len, device=p.device)[None] - padding[:, None]
        query_pos = fed_len - 1 - padding
        prompt_len = generation.prompt_len_on(p.device)
        self._layers.setdefault(layer, {})[PROBS] = self.kept.read(p, key_pos, query_pos, prompt_len)

    def _end_forward(self, module, args, output):
        got = sorted(self._layers)
        if got != list(range(self.n_layers)):
            missing = sorted(set(range(self.n_layers)) - set(got))
            raise EntropyLensError(
                f"{type(self.model).__name__}: layers {index_ranges(missing) or '(none)'} of {self.n_layers} "
                "reported no attention statistics in this forward; see README, Supported architectures"
            )
        names = self._layers[0]
        self.step = {name: torch.stack([self._layers[i][name] for i in got], 1) for name in names}
        self._layers = {}
        generation = self._generations[-1]
        if generation.in_prompt:  # a chunk of the prompt before its last: no token's row
            return
        generation.steps.append(
            {
                name: v.cpu().numpy() if name == TOP_KEY.name else v.float().cpu().numpy()
                for name, v in self.step.items()
            }
        )

    def logits_processor(self, fn) -> LogitsProcessor:
        """A transformers LogitsProcessor that hands each step's attention statistics to `fn`, so a
        sampler can steer on them without a second forward (entropix's entropy and varentropy). Pass it
        to generate() inside the block: `model.generate(..., logits_processor=[rec.logits_processor(fn)])`.

        Args:
            fn: `fn(input_ids, scores, stats) -> scores`, stats {name: (B, layers, heads) on the model's
                device} of the forward whose logits `scores` are (`self.step`).

        Returns:
            LogitsProcessor: calls `fn` at each step; EntropyLensError in one line where `fn` returns
            anything but scores of the same shape, or where no forward ran inside the block.
        """
        return _StepStatistics(self, fn)

    # -- the result -----------------------------------------------------------------------------------
    def result(self, sequences=None) -> GenerationResult:
        """The statistics of every token of the last generation (a generate() call, or the forwards of a
        decode loop of your own) so far (module docstring).

        Args:
            sequences: None, or (B, prompt + N) ids as generate returns them: the tokens of a decode loop
                of your own (default: generate's output where it ran inside the block, else the ids each
                step fed).

        Returns:
            GenerationResult: tokens, each recorded statistic per token, layer and head, and the meta.

        Raises:
            EntropyLensError: no forward ran inside the recorder.
        """
        recorded = [g for g in self._generations if g.steps]
        if not recorded:
            raise EntropyLensError(
                "no forward ran inside the GenerationRecorder; call model.generate(...) in it"
            )
        return self._result(recorded[-1], sequences)

    def results(self) -> list[GenerationResult]:
        """Every generation's result, oldest first: one per generate() call inside the block (and one for
        the forwards of a decode loop of your own)."""
        return [self._result(g, None) for g in self._generations if g.steps]

    def _result(self, generation: Generation, sequences) -> GenerationResult:
        steps = generation.steps
        N = len(steps)
        # a kept block's run of keys, and the top keys while a row sees fewer than k, grow step by step:
        # each padded to its widest (0; −1 for a key), so k never outgrows the keys a row saw
        for name, fill in ((PROBS, 0), (TOP_KEY.name, -1), (TOP_KEY_PROB, 0)):
            if name in steps[0]:
                K = max(s[name].shape[-1] for s in steps)
                for s in steps:
                    s[name] = np.pad(
                        s[name], [(0, 0)] * 3 + [(0, K - s[name].shape[-1])], constant_values=fill
                    )
        values = {name: np.stack([s[name] for s in steps], 1) for name in steps[0]}
        B = generation.batch
        sequences = sequences if sequences is not None else generation.sequences
        tokens = np.full((B, N), -1, dtype=np.int64)
        if sequences is not None:
            new = np.asarray(torch.as_tensor(sequences).cpu())[:, -N:]
            tokens[:, : new.shape[1]] = new
        else:  # step k fed token k − 1
            for k, fed in enumerate(generation.fed[: N - 1]):
                tokens[:, k] = fed
        (eos,) = generation.eos or (getattr(self.model.generation_config, "eos_token_id", None),)
        ends = np.isin(tokens, np.atleast_1d(np.asarray(eos if eos is not None else [], dtype=np.int64)))
        first_end = np.where(ends.any(1), ends.argmax(1), N - 1)
        lengths = np.minimum(first_end + 1, N)
        live = np.arange(N)[None, :] < lengths[:, None]
        tokens = np.where(live, tokens, -1)
        values = {
            name: np.where(
                live.reshape(B, N, *(1,) * (v.ndim - 2)), v, -1 if v.dtype.kind == "i" else np.nan
            ).astype(np.int64 if v.dtype.kind == "i" else np.float32)
            for name, v in values.items()
        }
        measure = self.session.measure
        meta = {
            "entropy_lens_version": __version__,
            "model": str(getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__),
            "model_class": type(self.model).__name__,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "stats": [name for name in values if name not in (TOP_KEY_PROB, PROBS)],
            **measure.recorded(),
            **({} if self.kept is None else self.kept.recorded()),
            "backend": "+".join(sorted(self.session.backends)),
            "attention_path": "+".join(sorted(self.session.paths)),
            "eos_token_id": None if eos is None else np.atleast_1d(np.asarray(eos)).tolist(),
        }
        return GenerationResult(
            tokens, values, generation.prompt_len, lengths.astype(np.int64), meta, generation.prompt
        )


class _Steps(Reports):
    """GenerationRecorder's consumer (capture/reports.py): each layer's row statistics to `_add`, and with
    keep_probs (`probe_rows` 1) its last row's probabilities to `_add_kept`."""

    def __init__(self, recorder: GenerationRecorder, *, probe_rows: int):
        self.recorder, self.probe_rows = recorder, probe_rows

    def report_stats(self, layer: int, stats: dict, key_offset: int, *, inputs_finite=None) -> None:
        self.recorder._add(layer, stats, key_offset)

    def report_rows(self, layer: int, p: torch.Tensor) -> None:
        self.recorder._add_kept(layer, p)


class _StepStatistics(LogitsProcessor):
    """`GenerationRecorder.logits_processor`'s processor: `fn(input_ids, scores, recorder.step)`."""

    def __init__(self, recorder: GenerationRecorder, fn):
        self.recorder, self.fn = recorder, fn

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.recorder.step is None:
            raise EntropyLensError(
                "the attention logits processor ran before its recorder saw a forward; call generate() "
                "inside `with recorder:`, the processor passed as logits_processor=[recorder.logits_processor(fn)]"
            )
        out = self.fn(input_ids, scores, self.recorder.step)
        if not isinstance(out, torch.Tensor) or out.shape != scores.shape:
            raise EntropyLensError(
                f"the attention logits processor's function returned {type(out).__name__} "
                f"{tuple(getattr(out, 'shape', ()))}; return the scores, shape {tuple(scores.shape)}"
            )
        return out
