"""`EntropyRecorder`: a context manager that turns entropy capture (and scales) on for a model.

    with EntropyRecorder(model, scales=1.2) as rec:
        model(input_ids)                 # any number of forwards
    rec.entropy   # (layers, heads, positions) float64 mean over the query rows seen, nats
    rec.count     # (positions,) how many rows were averaged at each position
    rec.session.paths, rec.session.backends   # what computed the layers (capture/paths.py), which kernels

On entry it registers the `entropy_lens` attention implementation, switches the model to it (or, for
BLOOM, MPT and Falcon, routes their layers' own forwards through it: capture/own_attention.py),
activates the session the attention function follows (capture/attention.py) and installs a forward
pre-hook that tells the host sums a forward begins and hands them its 2-D `attention_mask` (so
padded query rows are left out and left-padded rows are placed by their true position). On exit,
exceptions included, it undoes all of it, in reverse order.

The recorder only wires the hooks: the float64 sums, the asynchronous copies to the host and when
they are summed are `HostSums`'s (capture/accumulate.py). `rec.drain_into(sums)` moves everything
into the caller's own sums instead of reading it out (what `scan` does with each batch).

`ScaleSession` (scale_session.py) is the same without recording; the recorder is one, with its hooks
and sums added.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from entropy_lens.capture.accumulate import HostSums
from entropy_lens.capture.key_sums import KeySums, check_key_name
from entropy_lens.capture.reports import Reports
from entropy_lens.capture.scale_session import ScaleSession, check_keywords
from entropy_lens.errors import EntropyLensError, first_line, index_ranges
from entropy_lens.kernels.masks import decompose
from entropy_lens.statistics import ENTROPY, RECEIVED, ROWS, SINK_MASS, reduction_of


class EntropyRecorder(ScaleSession):
    """Accumulate per-layer, per-head, per-position attention entropy over forwards.

    Args:
        model: a transformers causal LM whose attention runs through transformers' attention interface.
        keep_probs: None, or ((a, b), (c, d)): keep the probabilities query positions a..b give keys c..d
            (token indices of a forward; a decode step's rows at the end of its cache), every layer and
            head, of each forward that holds them (`probs`), exact and without T × S.
        **options: ScaleSession's keywords, below (a misspelt one is a TypeError naming the close match).

    Keyword Args:
        scales: None (the model's own scale), m > 0, or (layers, heads) multipliers m_h of 1/√d
            (λ_h = m_h/√d); a tensor keeps its autograd graph.
        stats: names of statistics.STATISTICS (row statistics) and of statistics.KEY_STATISTICS
            (attention received by each key); default statistics.DEFAULT_STATS (entropy and, for a
            model with sinks, sink_mass).
        backend: "auto" (the default) or one of kernels.BACKENDS (a flags.Backend or its name).
        fused: one of kernels.FUSED_MODES (capture/fused.py; default "auto").
        **params: the statistics' parameters by name (statistics.PARAMETERS: each with its default and
            range), and the row-slice statistics' (spans=, offsets=: statistics/slices.py).
        measure: instead of stats, backend, fused and params: the record already parsed
            (flags.Measure.parse), as a scan and the monitor pass theirs.
        schedule: None, or a capture.schedule.Schedule: query row i scaled by m(i) on top of `scales`.
        choices: None, or a capture.fused.PathChoices: what fused "auto" measured (default: one per
            process).
        context: None, or a capture.shards.ShardedSequence: the model runs on this rank's shard of each
            sequence (--context-parallel).

    Raises:
        EntropyLensError: a flag or a scale out of range, or attention whose shape differs per layer.
    """

    def __init__(self, model, *, keep_probs=None, **options):
        check_keywords("EntropyRecorder", options)
        super().__init__(model, **options)
        self._blocks: list[
            dict[int, torch.Tensor]
        ] = []  # per forward that held the kept block: layer -> probs
        block = None if keep_probs is None else _checked_block(keep_probs)
        cfg = model.config.get_text_config()
        try:
            self.n_layers = cfg.num_hidden_layers
            self.n_heads = cfg.num_attention_heads
        except RuntimeError as e:  # transformers' AmbiguousGlobalPerLayerAttributeError: per-layer shapes
            raise EntropyLensError(
                f"{type(model).__name__} declares its attention shape per layer ({first_line(e)}); layer-dependent head "
                "counts are not supported; please report the architecture"
            ) from None
        self._sums = HostSums(self.n_layers, self.n_heads)
        # attention received, per key position: a decode step continues its sequence (capture/key_sums.py);
        # key reads ask the row sums' checks of the inputs first
        self._key_sums = KeySums(
            self.n_layers, self.n_heads, self.session.measure.key_stats, self._sums.check_inputs
        )
        self._reports = Recorded(self._sums, self._key_sums, block, self._blocks)
        self.session.reports = self._reports
        self._outer_mask = None  # the 2-D mask the model's own forward was given, while it runs
        self._last_mask = None  # the last forward's 2-D mask, which a decode step's continues

    def _install(self, stack: contextlib.ExitStack) -> None:
        # The decoder: every forward passes through it, the model's own and a direct decoder call
        # (runs/ computes the loss from its hidden states).
        # A wrapper (Gemma 3's multimodal model, say) may hand its decoder the masks it built instead of
        # the 2-D padding mask: the model's own forward keeps that for the decoder's hook.
        super()._install(stack)  # its decoder hook, which reads the cache's length, first
        decoder = self.model.get_decoder()
        hooks = [
            decoder.register_forward_pre_hook(self._begin_forward, with_kwargs=True),
            decoder.register_forward_hook(self._end_forward),
        ]
        if decoder is not self.model:
            hooks.append(self.model.register_forward_pre_hook(self._keep_outer_mask, with_kwargs=True))
            hooks.append(self.model.register_forward_hook(self._drop_outer_mask, always_call=True))
        stack.callback(self._release)
        for hook in hooks:
            stack.callback(hook.remove)

    @property
    def probs(self) -> list[np.ndarray]:
        """Each kept block (`keep_probs=`), one per forward that held it, oldest first, each
        (layers, B, Hq, b − a, d − c) float32: a row's probabilities over every key it may see (0 where it
        may not)."""
        return [torch.stack([block[i] for i in sorted(block)]).numpy() for block in self._blocks if block]

    def _keep_outer_mask(self, module, args, kwargs):
        self._outer_mask = padding_mask(kwargs.get("attention_mask"))

    def _drop_outer_mask(self, module, args, output):
        self._outer_mask = None

    def _begin_forward(self, module, args, kwargs):
        self.session.mask_memo.clear()  # the previous forward's masks are not kept alive
        if self._reports.keep_block is not None:
            self._blocks.append({})  # this forward's kept block, where it holds it
        sequence = self.session.context
        if sequence is not None:  # a shard: the whole sequence's mask places the rows of [0, b)
            self._sums.begin_forward(sequence.attention_mask, whole_sequence=True)
            self._key_sums.begin_forward(sequence.attention_mask)  # every key, from the group's first rank
            return
        given = kwargs.get("attention_mask")
        mask = padding_mask(given)
        mask = mask if mask is not None else self._outer_mask
        written = self.session.cache_seen
        fed = fed_of(args, kwargs)
        written = None if written is None or not isinstance(fed, torch.Tensor) else written + fed.shape[1]
        if mask is not None and written is not None and mask.shape[1] > written:
            mask = mask[:, :written]  # BLOOM's generate pads its mask over a pre-allocated cache's slots
        if mask is None and given is not None:  # generate's 4-D masks, for a pre-allocated cache
            mask = self._continued_mask(given, fed)
        self._last_mask = mask
        self._sums.begin_forward(mask)
        self._key_sums.begin_forward(mask)
        self.session.padding_start = padding_start_of(mask, unpadded=given is None and mask is None)

    def _continued_mask(self, given, fed) -> torch.Tensor | None:
        """The 2-D padding mask of a forward handed 4-D masks (generate's, for a pre-allocated cache): a
        prompt's, read off them (`key_padding_of`); a step that continues the cache the last forward
        filled, that forward's extended by its new tokens, real as generate feeds them; else None (the
        layers read their own masks)."""
        if not isinstance(fed, torch.Tensor):
            return None
        B, T = fed.shape[:2]
        seen = self.session.cache_seen
        if not seen:
            return key_padding_of(given, B, T)
        last = self._last_mask
        if last is None or last.shape != (B, seen):
            return None
        return torch.cat([last, last.new_ones(B, T)], 1)

    def _end_forward(self, module, args, output):
        """Every layer reported once: a layer that computes attention outside transformers' attention
        interface (or no softmax attention at all) would leave a hole in the sums, never a number."""
        got = sorted(self._sums.forward_layers)
        sequence = self.session.context  # a shard's layers report once per local chunk
        per_layer = 1 if sequence is None else sequence.reports_per_layer
        if per_layer > 1 and got == sorted(list(range(self.n_layers)) * per_layer):
            return
        if got != list(range(self.n_layers)):
            missing = sorted(set(range(self.n_layers)) - set(got))
            if not missing:  # every layer reported, some more than once (DiffLlama's two softmaxes)
                twice = sorted({i for i in got if got.count(i) > 1})
                raise EntropyLensError(
                    f"{type(self.model).__name__}: layers {index_ranges(twice)} ran attention more than once in "
                    "one forward, so a layer has no single attention distribution to measure; refused. "
                    "See README, Supported architectures"
                )
            raise EntropyLensError(
                f"{type(self.model).__name__}: layers {index_ranges(missing) or '(none)'} of {self.n_layers} "
                f"reported no attention entropy in this forward (reported: {index_ranges(got) or 'none'}). "
                "Their attention does not run through transformers' attention interface (or is not "
                "softmax attention), so entropy_lens cannot measure it; see README, Supported architectures"
            )

    def _release(self) -> None:
        self._outer_mask = self._last_mask = None
        self.session.padding_start = None
        self._sums.release_mask()
        self._key_sums.release_mask()
        self.session.mask_memo.clear()

    def drain_into(self, sums: dict[str, torch.Tensor], axis: str = ROWS) -> None:
        """Add everything recorded on `axis` into the caller's float64 sums (layers, heads, n) and leave
        it empty, waiting for copies in flight: a scan's batch goes straight into the scan's running sums,
        without the recorder's own arrays or a read-out copy. ROWS: the row statistics, keyed as `sums`'s
        (`kernels.stats.sum_names`), and "count" (n,) int64 the rows per position; KEYS: the key
        statistics, keyed as `key_sums`, and "count" (n,) int64 the batch rows with a real key at each
        position.

        Args:
            sums: the caller's {name: float64 tensor} running sums (above), added to in place.
            axis: statistics.ROWS or statistics.KEYS.
        """
        (self._sums if axis == ROWS else self._key_sums).drain_into(sums)

    @property
    def stats(self) -> tuple[str, ...]:
        """The row statistics recorded (entropy, and sink_mass for a model with attention sinks)."""
        return tuple(self._sums.stats)

    @property
    def key_stats(self) -> tuple[str, ...]:
        """The key statistics recorded (attention received), as `stats=` named them."""
        return tuple(self._key_sums.stats)

    @property
    def key_sums(self) -> dict[str, np.ndarray]:
        """Raw accumulators of the key statistics, exact to merge; empty (0 positions) where none was asked for.

        {"received", "received_sq", ...: (layers, heads, key positions) float64 over the forwards' batch
        rows, "count": batch rows with a real key at each position (key positions,) int64}."""
        return self._key_sums.read()

    def received(self, name: str = RECEIVED.name) -> np.ndarray | None:
        """(layers, heads, key positions) a key statistic per key position (by its true position, as the
        rows), averaged over the sequences (a decode step continues its own), or for received_max the
        largest; NaN where no batch row had a key there; None where it was not recorded.

        Args:
            name: a key statistic of statistics.KEY_STATISTICS (or its square, "received_sq"); another
                name is an EntropyLensError naming the close match.
        """
        check_key_name(name)
        sums = self._key_sums.read()
        return None if name not in sums else reduction_of(name).finish(sums[name], sums["count"])

    @property
    def has_sinks(self) -> bool:
        """Whether the model's attention has sinks (gpt-oss), where `sink_mass` is recorded too."""
        return SINK_MASS.name in self._sums.stats

    # -- results --------------------------------------------------------------------------------
    @property
    def count(self) -> np.ndarray:
        """(positions,) rows averaged per position (every layer sees the same rows)."""
        return self._sums.read()["count"].copy()

    @property
    def sums(self) -> dict[str, np.ndarray]:
        """Raw accumulators of the row statistics, exact to merge.

        {"entropy", "entropy_sq", ...: (layers, heads, positions) float64 sums of each statistic (and its
        square), "count": rows per position (positions,) int64}."""
        return self._sums.read()

    def mean(self, name: str) -> np.ndarray | None:
        """(layers, heads, positions) mean of a sum of `sums` (a statistic or its square) over the rows
        seen, or for a maximum (max_logit) the largest value of any row; NaN where nothing was seen;
        None for a statistic this model does not report.

        Args:
            name: a key of `sums`: a statistic ("entropy") or its square ("entropy_sq").
        """
        sums = self._sums.read()
        if name not in sums:
            return None
        return reduction_of(name).finish(sums[name], sums["count"])

    @property
    def entropy(self) -> np.ndarray:
        """(layers, heads, positions) mean entropy in nats; NaN where nothing was seen."""
        return self.mean(ENTROPY.name)

    @property
    def entropy_sq(self) -> np.ndarray:
        """(layers, heads, positions) mean squared entropy in nats²; NaN where nothing was seen."""
        return self.mean(ENTROPY.name + "_sq")

    @property
    def sink_mass(self) -> np.ndarray | None:
        """(layers, heads, positions) mean probability of the attention sink; None without sinks."""
        return self.mean(SINK_MASS.name)


def _checked_block(keep_probs) -> tuple[tuple[int, int], tuple[int, int]]:
    """keep_probs=((a, b), (c, d)), 0 <= a < b, 0 <= c < d, checked; EntropyLensError in one line."""
    from entropy_lens.kernels.probs import checked_span

    if not isinstance(keep_probs, (tuple, list)) or len(keep_probs) != 2:
        raise EntropyLensError(
            f"keep_probs must be ((a, b), (c, d)): query positions a..b over keys c..d; got {keep_probs!r}"
        )
    return tuple(checked_span(what, span, 1 << 40) for what, span in zip(("rows", "keys"), keep_probs))


class Recorded(Reports):
    """The recorder's consumer (capture/reports.py): the row statistics to its HostSums, which take the
    unread check of a layer's inputs (`stats_check_inputs`), the column state to its KeySums, the kept
    block (`keep_block`, keep_probs') to the forward's entry of `blocks` (the recorder opens one per
    forward that may hold it)."""

    stats_check_inputs = True

    def __init__(self, sums: HostSums, key_sums: KeySums, keep_block: tuple | None, blocks: list[dict]):
        self.sums, self.key_sums, self.keep_block, self.blocks = sums, key_sums, keep_block, blocks

    def report_stats(self, layer: int, stats: dict, key_offset: int, *, inputs_finite=None) -> None:
        self.sums.add(layer, stats, key_offset, inputs_finite=inputs_finite)

    def report_key_state(self, layer: int, state: dict, key_offset: int) -> None:
        self.key_sums.add_state(layer, state, key_offset)

    def report_block(self, layer: int, probs: torch.Tensor) -> None:
        self.blocks[-1][layer] = probs.detach().to("cpu", torch.float32)  # the forward's (_begin_forward)


def padding_start_of(mask, *, unpadded: bool):
    """Session.padding_start of a forward: each batch row's first real key (the first the 2-D padding
    mask (B, S) lets through) and S; (None, None) without a mask (`unpadded`); None if not known."""
    if mask is not None:
        return (mask != 0).to(torch.uint8).argmax(dim=-1), mask.shape[1]
    return (None, None) if unpadded else None


def key_padding_of(mask, B: int, T: int) -> torch.Tensor | None:
    """(B, T) bool, True = a real token: the 2-D padding mask of a forward from an empty cache, read off
    the 4-D causal mask (B|1, 1, T, S) transformers built for it (a dict of them by layer type: generate's
    for a pre-allocated cache, whose first T slots the forward fills), exactly (`kernels.masks.decompose`:
    causal, a window and key padding, or nothing); None where no mask has that form."""
    for m in mask.values() if isinstance(mask, dict) else (mask,):
        if not isinstance(m, torch.Tensor) or m.ndim != 4 or m.shape[-1] < T:
            continue
        m = m[..., :T] if m.dtype == torch.bool else m[..., :T] > torch.finfo(m.dtype).min / 2
        parts = decompose(m, B, T, T, causal=True)
        if parts is not None:
            keep = parts[0]
            return torch.ones(B, T, dtype=torch.bool, device=m.device) if keep is None else keep.expand(B, T)
    return None


def fed_of(args, kwargs) -> torch.Tensor | None:
    """What a decoder's forward was fed: its input_ids (by keyword or first), else its inputs_embeds."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    return ids if isinstance(ids, torch.Tensor) else kwargs.get("inputs_embeds")


def padding_mask(mask):
    """`mask` if it is a 2-D padding mask (B, S), else None."""
    return mask if isinstance(mask, torch.Tensor) and mask.ndim == 2 else None
