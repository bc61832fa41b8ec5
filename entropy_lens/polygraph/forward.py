"""lm-polygraph's AttentionScore (LLM-Check) on the lens: each row's probability of its own key at every
position of a teacher-forced forward (the row-slice statistic offset_prob at d = 0, read off the forward's
log-sum-exp), instead of the (layers, heads, T, T) maps `forwardpass_attention_weights` copies out of
eager `output_attentions` per text.

`LensForwardpassDiagonalCalculator` gives `forwardpass_attention_diagonal`, per text the (layers, heads, T)
probabilities p(i, i) of the forward lm-polygraph's `AttentionForwardPassCalculator` runs (the text's
tokenized ids, then its greedy tokens; no mask, as it runs); `AttentionScore` is lm-polygraph's estimator
(its class, its `layer` and `gen_only`) reading them: −Σ_heads Σ_rows log(p(i, i) + 1e-12) / heads at its
layer, the diagonal of the maps its own reads. This module is the calculator's builder
(`load_stat_calculator`), as the package's is the greedy calculator's.

lm-polygraph's own AttentionScore reads `forwardpass_attention_weights`, which its
AttentionForwardPassCalculator copies out of `output_attentions=True`: maps only eager attention returns
(on sdpa its torch.cat of no maps fails). `LensAttentionForwardPassCalculator`, in its place in
`stat_calculators`, runs it on an eager model and refuses any other in one line naming `AttentionScore`
here, which gives the same uncertainty without the maps.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from lm_polygraph.estimators.attention_score import AttentionScore as PolygraphAttentionScore
from lm_polygraph.stat_calculators.attention_forward_pass import AttentionForwardPassCalculator
from lm_polygraph.stat_calculators.stat_calculator import StatCalculator

from entropy_lens.capture import EntropyRecorder
from entropy_lens.errors import EntropyLensError

__all__ = [
    "DIAGONAL",
    "AttentionScore",
    "LensAttentionForwardPassCalculator",
    "LensForwardpassDiagonalCalculator",
]

DIAGONAL = "forwardpass_attention_diagonal"  # per text: (layers, heads, T) p(i, i) of the forward
OWN_KEY = "offset_prob@0"  # the recorder's array of offset_prob at d = 0


class LensForwardpassDiagonalCalculator(StatCalculator):
    """`forwardpass_attention_diagonal` for AttentionScore, from the capture (module docstring).

    Args:
        backend: the kernels' backend of the recorder ("auto" or one of entropy_lens.BACKENDS).
    """

    def __init__(self, backend: str = "auto"):
        super().__init__()
        self.backend = backend

    @staticmethod
    def meta_info() -> tuple[list[str], list[str]]:
        return [DIAGONAL], ["greedy_tokens"]

    def __call__(self, dependencies, texts, model, max_new_tokens: int = 100):
        """Per text, the (layers, heads, T) own-key probabilities of lm-polygraph's teacher-forced forward."""
        batch = model.tokenize(texts)
        # the forward's logits are not read: only the last row's (T × vocab floats, 3 GiB at 16K on SmolLM2)
        last = (
            {"logits_to_keep": 1}
            if "logits_to_keep" in inspect.signature(model.model.forward).parameters
            else {}
        )
        out = []
        for i, tokens in enumerate(dependencies["greedy_tokens"]):
            ids = torch.cat([batch["input_ids"][i], torch.tensor(tokens, dtype=torch.long)])[None]
            recorder = EntropyRecorder(model.model, stats="offset_prob", offsets=(0,), backend=self.backend)
            with recorder, torch.no_grad():
                model.model(ids.to(model.device()), **last)
            out.append(recorder.mean(OWN_KEY))  # one row per position: its own value, float64
        return {DIAGONAL: out}


class AttentionScore(PolygraphAttentionScore):
    """lm-polygraph's AttentionScore reading `forwardpass_attention_diagonal` instead of the full maps.

    Args:
        layer: the layer it reads (None: the model's middle, num_hidden_layers // 2), as the original.
        gen_only: only the generated tokens' rows (the last n, the last one excluded), as the original.
    """

    def __init__(self, layer: int | None = None, gen_only: bool = False):
        super().__init__(layer=layer, gen_only=gen_only)
        self.stats_dependencies = [DIAGONAL, "greedy_tokens"]

    def __call__(self, stats) -> np.ndarray:
        if self.layer is None:
            config = stats["model"].model.config
            self.layer = getattr(config, "text_config", config).num_hidden_layers // 2
        ue = []
        for diagonal, tokens in zip(stats[DIAGONAL], stats["greedy_tokens"], strict=True):
            own = diagonal[self.layer]  # (heads, T)
            if self.gen_only:  # the original's attn[-n:-1, -n:-1] and its diagonal
                own = own[:, -len(tokens) : -1]
            ue.append(np.log(own + 1e-12).sum(-1).sum() / own.shape[0])
        return -np.array(ue)


class LensAttentionForwardPassCalculator(AttentionForwardPassCalculator):
    """lm-polygraph's AttentionForwardPassCalculator (`forwardpass_attention_weights`, the full maps its
    AttentionScore reads) on an eager model; on any other attention one line naming `AttentionScore` here,
    where lm-polygraph's own stops at a torch.cat of no maps (module docstring)."""

    def __call__(self, dependencies, texts, model, max_new_tokens: int = 100):
        implementation = getattr(model.model.config, "_attn_implementation", None)
        if implementation != "eager":
            raise EntropyLensError(
                f"lm-polygraph's AttentionScore reads eager attention's full maps, which the model's "
                f"{implementation!r} attention does not return: use entropy_lens.polygraph.forward."
                "AttentionScore(layer=..., gen_only=...), the same uncertainty from the maps' diagonal, or "
                'model.set_attn_implementation("eager")'
            )
        return super().__call__(dependencies, texts, model, max_new_tokens)


def load_stat_calculator(config, environment):
    """lm-polygraph's builder protocol: the calculator `stat_calculators` registered from this module,
    named by its configuration's `obj` (none: the diagonal's)."""
    if (config or {}).get("obj") == LensAttentionForwardPassCalculator.__name__:
        return LensAttentionForwardPassCalculator()
    return LensForwardpassDiagonalCalculator()
