"""kvpress's ObservedAttentionPress without eager attention: each key's score, the attention it receives
divided by the number of queries that may attend it, from `attention_received` (two streaming passes,
O(T) memory) instead of the T × T weights that only eager attention returns.

    score(module, hidden_states, keys, values, attentions, kwargs) -> (B, Hkv, S) float32
        queries: the layer's own projection of `hidden_states` (kvpress's get_prerope_query_states:
                 q_proj, Phi-3's fused qkv_proj, Qwen3's and Gemma3's q_norm), rotated by the layer's
                 `position_embeddings` with its model's own apply_rotary_pos_emb (Llama's where the model
                 has none), as kvpress's SnapKVPress recomputes its window's queries
        keys:    the cache's, as kvpress's hook hands them over (after RoPE)
        scores:  softmax_scale = module.scaling; the layer's attention mask (None: causal) read as
                 causal + sliding window + key padding (`kernels.masks.as_key_padding`), or passed whole;
                 received_j / n_j, n_j the real query rows at or after key j: kvpress's S − j without
                 padding, the sequence's own length − j when right-padded (`real_rows_after`; padded
                 rows give nothing), then the mean over each key head's query heads (GQA)

Inside `with press(model):` the scores come from the layer's own forward: the press switches the model
to the capture's attention function (capture.ScaleSession, recording attention received alone), whose
pass computes the layer's output and, on CPU, each key's received from the same score tiles
(the native kernel's one pass, kernels/plan.py's ONE_PASS_KEYS; on CUDA the Triton forward and its
column pass on that forward's log-sum-exp), and `score` reads what the layer's forward left. Called
outside it (another press wrapping this one, a direct call), `score` recomputes the queries and runs
`attention_received` as described above (`received_beside`); both give the same scores.

One lens press per model at a time: a second entered inside the first (the same press or another) is
refused in one line, as is a layer whose cache another press compressed before this one scored it (fewer
keys than the prefill's queries: kvpress's own press around this one, or before it in ComposedPress),
whose scores would be the leftovers' (put the lens press first in ComposedPress to chain presses). The
compression ratio is checked when the press is made, in one line.

The scores equal kvpress's own press on eager attention up to float rounding (its weights are in the
model's dtype, ours float32), and each sequence of a padded batch scores as it does alone; kvpress's
own press does not there (it sums the padded rows' weights and divides by S − j: docs/guides/kvpress.md). Attention outside `softmax(scaling · q·k + mask)` (a logit soft-cap,
attention sinks) is refused: those layers' weights are not this formula's.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from dataclasses import dataclass, field

import torch
from kvpress.presses.observed_attention_press import ObservedAttentionPress as KVPressObservedAttention
from kvpress.utils import get_prerope_query_states
from torch import nn
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_rotary

from entropy_lens.capture import ScaleSession
from entropy_lens.capture.reports import Reports
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import attention_received
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.received import real_rows_after
from entropy_lens.progress import progress_bar
from entropy_lens.settings import check_argument
from entropy_lens.statistics import ENTROPY, RECEIVED


def rotate_queries(module: nn.Module, query: torch.Tensor, position_embeddings) -> torch.Tensor:
    """`query` (B, Hq, T, D) rotated by the layer's (cos, sin), with the function its model applies.

    Args:
        module: the attention layer (its class's module names the model's apply_rotary_pos_emb).
        query: (B, Hq, T, D) queries before RoPE.
        position_embeddings: the layer's (cos, sin), or None (no rotary: the queries as they are).

    Returns:
        Tensor: (B, Hq, T, D) the queries the layer's attention sees.
    """
    if position_embeddings is None:
        return query
    cos, sin = position_embeddings
    apply = getattr(sys.modules.get(type(module).__module__), "apply_rotary_pos_emb", llama_rotary)
    return apply(query, query, cos, sin)[0]


def layer_mask(attention_mask, B: int, T: int, S: int) -> dict:
    """The layer's mask as `attention_received`'s keywords: {"mask", "window"} (causal always).

    Args:
        attention_mask: what the model passed the layer: None (causal), a bool or additive float
            (B|1, 1, T, S) mask.
        B: batch size.
        T: query rows.
        S: keys.

    Returns:
        dict: mask (B, 1, 1, S) key padding, the whole bool mask, or None; window W or None.
    """
    if attention_mask is None:
        return {"mask": None, "window": None}
    mask = attention_mask
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    if mask.ndim == 4:
        form = as_key_padding(mask, B, T, S, True)
        if form is not None:
            return {"mask": form[0], "window": form[1]}
    return {"mask": mask, "window": None}


PROGRESS_FROM = 4096  # the prefill length from which the press reports its layers (`progress`)
# model -> the lens press whose context it is in: a second one is refused (`ObservedAttentionPress.__call__`)
_PRESSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass
class ObservedAttentionPress(KVPressObservedAttention):
    """kvpress's ObservedAttentionPress (H2O-like: keys scored by the attention they receive), scored by
    `entropy_lens.attention_received`, so it runs on any attention implementation (sdpa, flash) and in
    O(T) memory; kvpress's asserts eager. A drop-in: same name, arguments and scores.

    Args:
        compression_ratio: the fraction of the prefilled keys and values to remove, in [0, 1); checked
            when the press is made.
        backend: the kernels' backend for `attention_received` ("auto": native C++ on CPU, Triton on
            CUDA; see `entropy_lens.kernels.BACKENDS`).
        progress: a prefill of PROGRESS_FROM tokens or more reports its layers on stderr as each is
            scored (a 32K prefill is minutes of one forward on a CPU); False: silent.
        from_forward: inside `with press(model):`, score each layer from its own forward's pass (the
            module docstring); False: kvpress's attention runs as it would without the press, and each
            layer is scored by a pass of its own beside it (the benchmark's and the tests' other way).
    """

    compression_ratio: float = 0.0
    backend: str = "auto"
    progress: bool = True
    from_forward: bool = True
    # layer -> (B, Hq, S) attention received, left by the layer's forward for its hook (`__call__`)
    _received: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        ratio = self.compression_ratio
        check_argument("compression_ratio", ratio, float, {}, example=0.5)
        if not 0 <= ratio < 1:
            raise EntropyLensError(
                f"compression_ratio must be at least 0 and below 1 (got {ratio!r}): the fraction of the "
                "prefilled keys removed; pass compression_ratio=0.5 or another value in [0, 1)"
            )
        super().__post_init__()

    @contextlib.contextmanager
    def __call__(self, model):
        """kvpress's context (its hooks compress each layer's cache after its forward), with the model's
        attention run by the capture so that each layer's forward leaves its keys' attention received.

        Args:
            model: a transformers causal LM kvpress supports.

        Yields:
            None: inside, prefills are compressed.

        Raises:
            EntropyLensError: the model is already inside a lens press's context (nested presses).
        """
        outer = _PRESSED.get(model)
        if outer is not None:
            which = "this press" if outer is self else f"another lens press ({outer!r})"
            raise EntropyLensError(
                f"{type(model).__name__} is already inside {which}: nested presses compress each layer "
                "twice, the inner one scoring the outer one's leftovers; use one press, or chain presses "
                "with kvpress's ComposedPress([...]) with the lens press first"
            )
        with contextlib.ExitStack() as stack:
            _PRESSED[model] = self
            stack.callback(_PRESSED.pop, model, None)
            if self.from_forward:
                stack.callback(self._received.clear)  # what no hook took (a forward cut short)
                stack.enter_context(self._forward_session(model))
            stack.enter_context(super().__call__(model))
            yield

    def _forward_session(self, model) -> ScaleSession:
        """The capture session recording attention received alone (its row pass computes the entropy
        with it, as every capture does; nothing keeps it), each layer's sums left in `_received`."""
        scaling = ScaleSession(model, stats=(ENTROPY.name, RECEIVED.name), backend=self.backend, fused="on")
        scaling.session.reports = _Received(self._received)
        return scaling

    def score(
        self,
        module: nn.Module,
        hidden_states: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attentions: torch.Tensor | None,
        kwargs: dict,
    ) -> torch.Tensor:
        """Each cached key's score: the attention it receives over the prefill's real queries, divided by
        the number of real queries at or after it, averaged over its key head's query heads.

        Args:
            module: the attention layer kvpress's hook ran on.
            hidden_states: (B, T, hidden) the layer's input.
            keys: (B, Hkv, S, D) the cache's keys after RoPE (S = T: a prefill).
            values: (B, Hkv, S, D) the cache's values (unused).
            attentions: the layer's attention weights, or None (unused: never needed).
            kwargs: the layer's keyword arguments (position_embeddings, attention_mask).

        Returns:
            Tensor: (B, Hkv, S) float32 scores; higher is kept.

        Raises:
            EntropyLensError: a layer with a logit soft-cap or attention sinks, or a cache with fewer keys
                than the prefill's queries (another press compressed it first).
        """
        softcap = getattr(getattr(module, "config", None), "attn_logit_softcapping", None)
        if softcap is not None or getattr(module, "sinks", None) is not None:
            raise EntropyLensError(
                f"{type(module).__name__} caps its logits or has attention sinks: the lens's "
                "ObservedAttentionPress scores softmax(scaling * q.k + mask) alone; use kvpress's own "
                'with attn_implementation="eager"'
            )
        B, Hkv, S, _ = keys.shape
        T = hidden_states.shape[1]
        if S < T:
            raise EntropyLensError(
                f"layer {module.layer_idx}'s cache holds {S} keys for the prefill's {T} queries: another "
                "press compressed it before the lens press scored it (a press around this one, or before "
                "it in ComposedPress); use one press, or put the lens press first in ComposedPress([...])"
            )
        mask = layer_mask(kwargs.get("attention_mask"), B, T, S)
        received = self._received.pop(module.layer_idx, None)
        if received is None or received.shape[-1] != S:
            received = self.received_beside(module, hidden_states, keys, kwargs, mask)
        # n_j: the real query rows at or after key j (S − j unpadded): a padded row gives nothing, so a
        # right-padded sequence divides by its own length − j, as the sequence alone does
        rows = real_rows_after(mask["mask"], T, S, received.device).view(-1, 1, 1, S)
        scores = received.view(B, Hkv, -1, S) / rows.clamp_min(1.0)  # 0/1 where no real row follows
        self._scored(module, T)
        return scores.mean(2)

    def received_beside(
        self, module: nn.Module, hidden_states, keys, kwargs: dict, mask: dict
    ) -> torch.Tensor:
        """(B, Hq, S) attention received from a pass of its own: the layer's queries recomputed and
        rotated, then `attention_received` over the cache's keys.

        Args:
            module: the attention layer.
            hidden_states: (B, T, hidden) the layer's input.
            keys: (B, Hkv, S, D) the cache's keys after RoPE.
            kwargs: the layer's keyword arguments (position_embeddings).
            mask: `layer_mask`'s keywords for the layer's mask.

        Returns:
            Tensor: (B, Hq, S) float32.
        """
        query = get_prerope_query_states(module, hidden_states)
        query = rotate_queries(module, query, kwargs.get("position_embeddings"))
        return attention_received(
            query,
            keys,
            softmax_scale=float(module.scaling),
            stats=RECEIVED.name,
            causal=True,
            backend=self.backend,
            **mask,
        )[RECEIVED.name]

    def _scored(self, module: nn.Module, T: int) -> None:
        """One layer scored: a prefill of PROGRESS_FROM tokens or more moves a bar over the model's layers
        (opened at layer 0, closed at the last)."""
        layers, index = module.config.num_hidden_layers, module.layer_idx
        if index == 0 and self.progress and T >= PROGRESS_FROM:
            self._bar = progress_bar(
                total=layers, enabled=True, desc=f"lens press, {T:,} tokens", unit="layer"
            )
        bar = getattr(self, "_bar", None)
        if bar is not None:
            bar.update(1)
            if index == layers - 1:
                bar.close()
                self._bar = None


class _Received(Reports):
    """The press's session's consumer (capture/reports.py): each prefill's (key offset 0) column sums into
    `received`, for the layer's hook; a decode step's are not scored (kvpress compresses prefills alone)."""

    def __init__(self, received: dict):
        self.received = received

    def report_stats(self, layer: int, stats: dict, key_offset: int, *, inputs_finite=None) -> None:
        """Asked, so that the layers capture (run the capture's pass); no row statistic is kept."""

    def report_key_state(self, layer: int, state: dict, key_offset: int) -> None:
        if key_offset == 0:
            self.received[layer] = state["sum"]


__all__ = ["ObservedAttentionPress", "layer_mask", "rotate_queries"]
