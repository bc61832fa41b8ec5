"""lm-polygraph's attention estimators fed by the generation recorder: no `output_attentions`, no T × T.

lm-polygraph (PyPI `lm-polygraph`, the extra `polygraph`; an environment of its own: `make
polygraph-env`) computes its attention-based uncertainty (RAUQ, Focus) from `attention_all`, each
generated token's attention over the tokens generated before it, which its `GreedyProbsCalculator`
copies out of `generate(output_attentions=True)`: every layer's (heads, T, T) maps, per step. Here the
same dependency comes from `GenerationRecorder(keep_probs=("generated", "generated"))` around the same
`generate()` on the model's own attention implementation (sdpa), exact, O(heads · T) per layer and step::

    from entropy_lens.polygraph import estimate_uncertainty, stat_calculators
    from lm_polygraph.estimators import RAUQ

    estimate_uncertainty(model, RAUQ(), "Who wrote Persuasion?")  # lm_polygraph.estimate_uncertainty's
    UEManager(..., available_stat_calculators=stat_calculators("Whitebox"), ...)  # in your own manager

`stat_calculators(model_type)` is lm-polygraph's default list (`register_default_stat_calculators`) with
its `GreedyProbsCalculator` replaced by `LensGreedyProbsCalculator`, which returns every statistic the
original does (greedy tokens, log-probabilities, alternatives, texts, likelihoods; hidden states where
asked for) and `attention_all` in the original's layout, so lm-polygraph's estimators run unchanged.
AttentionScore reads the diagonal of a teacher-forced forward's full maps (`forwardpass_attention_weights`,
prompt rows included): `entropy_lens.polygraph.forward.AttentionScore` is lm-polygraph's estimator reading
that diagonal alone, `forwardpass_attention_diagonal`, which `stat_calculators` adds (forward.py).
"""

from __future__ import annotations

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.generation import GenerationRecorder
from entropy_lens.results.generation import PROBS

try:
    from lm_polygraph.stat_calculators.greedy_probs import GreedyProbsCalculator
except ImportError as err:  # pragma: no cover - the extra is missing
    raise ImportError(
        "entropy_lens.polygraph needs lm-polygraph: `make polygraph-env` builds .venv-polygraph with it "
        "(or pip install -e '.[polygraph]' in an environment of your own)"
    ) from err

__all__ = ["LensGreedyProbsCalculator", "attention_all", "estimate_uncertainty", "stat_calculators"]

BUILDER = "entropy_lens.polygraph"  # this module builds its calculators (`load_stat_calculator`)
KEEP = ("generated", "generated")


class LensGreedyProbsCalculator(GreedyProbsCalculator):
    """lm-polygraph's GreedyProbsCalculator, its `attention_all` from the generation recorder.

    Args:
        output_attentions: whether to return `attention_all` (and the tokenizer), as the original.
        output_hidden_states: whether to return the embeddings, as the original.
        n_alternatives: the alternatives kept per generated token, as the original.
        backend: the kernels' backend of the recorder ("auto" or one of entropy_lens.BACKENDS).
    """

    def __init__(
        self,
        output_attentions: bool = True,
        output_hidden_states: bool = False,
        n_alternatives: int = 10,
        backend: str = "auto",
    ):
        super().__init__(False, output_hidden_states, n_alternatives)
        self.lens_attentions = output_attentions
        self.backend = backend

    def __call__(self, dependencies, texts, model, max_new_tokens: int = 100):
        """The original's statistics for `texts`, generated greedily by `model` (a WhiteboxModel), with
        `attention_all` (L · H, c, c) per text from the recorder (module docstring)."""
        if not self.lens_attentions:
            return super().__call__(dependencies, texts, model, max_new_tokens)
        with GenerationRecorder(model.model, keep_probs=KEEP, backend=self.backend) as rec:
            result = super().__call__(dependencies, texts, model, max_new_tokens)
        result["attention_all"] = attention_all(rec.result().stat(PROBS), result["greedy_tokens"])
        result["tokenizer"] = model.tokenizer
        return result


def attention_all(probs: np.ndarray, greedy_tokens) -> list[np.ndarray]:
    """lm-polygraph's `attention_all` from the recorder's kept block: per text i, (layers · heads, c, c)
    float64, c its generated tokens (its end token included, as `greedy_tokens` holds them); row j >= 1
    holds generated token j's row's probabilities over the keys of tokens 0 .. j − 1, layer-major
    (layer · heads + head), row 0 and the rest zeros, as GreedyProbsCalculator lays them out.

    Args:
        probs: (B, N, layers, heads, K) the result's `probs` of keep_probs=("generated", "generated").
        greedy_tokens: per text, its generated ids (lm-polygraph's `greedy_tokens`).

    Returns:
        list: one (layers · heads, c, c) array per text.

    Raises:
        EntropyLensError: a text with more tokens than the recorder saw, or a row that is not a number
            (the two disagree on where a text ended).
    """
    _, N, L, H, _ = probs.shape
    out = []
    for i, tokens in enumerate(greedy_tokens):
        c = len(tokens)
        if c > N or not np.isfinite(probs[i, :c]).all():
            raise EntropyLensError(
                f"text {i}: lm-polygraph kept {c} generated tokens, the recorder {N} (live ones finite); "
                "they must generate with the same end token"
            )
        block = np.zeros((L * H, c, c))
        for j in range(1, c):
            block[:, j, :j] = probs[i, j, :, :, :j].reshape(L * H, j)
        out.append(block)
    return out


def load_stat_calculator(config, environment):
    """lm-polygraph's builder protocol: the calculator `config` describes (`stat_calculators`)."""
    return LensGreedyProbsCalculator(config.output_attentions, config.output_hidden_states)


def stat_calculators(model_type: str = "Whitebox", **options) -> list:
    """lm-polygraph's default stat calculators for `model_type` (`register_default_stat_calculators`,
    its keywords passed on) with GreedyProbsCalculator replaced by LensGreedyProbsCalculator, and
    LensForwardpassDiagonalCalculator added (forward.py: what `forward.AttentionScore` reads).

    Args:
        model_type: "Whitebox" (the one that reads attention; others come back as lm-polygraph's).
        **options: register_default_stat_calculators' keywords (language, hf_cache, output_attentions...).

    Returns:
        list: StatCalculatorContainer, for UEManager's `available_stat_calculators`.
    """
    from lm_polygraph.defaults.register_default_stat_calculators import register_default_stat_calculators
    from lm_polygraph.utils.factory_stat_calculator import StatCalculatorContainer

    from entropy_lens.polygraph.forward import LensForwardpassDiagonalCalculator

    containers = register_default_stat_calculators(model_type, **options)
    stats, dependencies = LensForwardpassDiagonalCalculator.meta_info()
    containers.append(
        StatCalculatorContainer(
            obj=LensForwardpassDiagonalCalculator,
            builder=BUILDER + ".forward",
            cfg={},
            stats=stats,
            dependencies=dependencies,
        )
    )
    for k, sc in enumerate(containers):
        if sc.name == GreedyProbsCalculator.__name__:
            stats, dependencies = LensGreedyProbsCalculator.meta_info()
            containers[k] = StatCalculatorContainer(
                obj=LensGreedyProbsCalculator,
                builder=BUILDER,
                cfg=sc.cfg,
                stats=stats,
                dependencies=dependencies,
            )
    return containers


def estimate_uncertainty(model, estimator, input_text: str):
    """lm_polygraph.estimate_uncertainty on `stat_calculators`: the estimator's uncertainty of `model`'s
    greedy generation after `input_text`.

    Args:
        model: an lm_polygraph WhiteboxModel.
        estimator: an lm_polygraph estimator (RAUQ, Focus, MaximumSequenceProbability, ...).
        input_text: the prompt.

    Returns:
        UncertaintyOutput: lm-polygraph's, as its own function returns it.
    """
    import importlib

    polygraph = importlib.import_module("lm_polygraph.utils.estimate_uncertainty")
    own = polygraph.register_default_stat_calculators
    polygraph.register_default_stat_calculators = stat_calculators
    try:
        return polygraph.estimate_uncertainty(model, estimator, input_text)
    finally:
        polygraph.register_default_stat_calculators = own
