"""lm-polygraph's attention estimators fed by the generation recorder: no `output_attentions`, no T × T.

lm-polygraph (PyPI `lm-polygraph`, the extra `polygraph`; an environment of its own: `make
polygraph-env`) computes its attention-based uncertainty (RAUQ, Focus) from `attention_all`, each
generated token's attention over the tokens generated before it, which its `GreedyProbsCalculator`
copies out of `generate(output_attentions=True)`: every layer's (heads, T, T) maps, per step. Here the
same dependency comes from `GenerationRecorder(keep_probs=("generated", "generated"))` around the same
`generate()` on the model's own attention implementation (sdpa), exact, O(heads · T) per layer and step::

    from lm_polygraph.estimators import RAUQ
    from entropy_lens import load_model
    from entropy_lens.polygraph import estimate_uncertainty, stat_calculators

    loaded = load_model("tiny-nope")
    out = estimate_uncertainty(loaded.model, RAUQ(), "Who wrote Persuasion?", tokenizer=loaded.tokenizer)
    out.uncertainty, out.generation_text  # lm_polygraph.estimate_uncertainty's UncertaintyOutput
    # or lm_polygraph's WhiteboxModel(model, tokenizer, ...) in its place; in a UEManager of your own
    # (whitebox_model(model, tokenizer) wraps the model as estimate_uncertainty does):
    UEManager(..., available_stat_calculators=stat_calculators("Whitebox"), ...)

`estimate_uncertainty` takes lm-polygraph's `WhiteboxModel`, or a Hugging Face causal LM with its
`tokenizer=`, which it wraps in a WhiteboxModel as `WhiteboxModel.from_pretrained` prepares one (a copy
of the tokenizer padding on the left, with the end token as padding where it has none), offline; the
generation guide (docs/guides/generation.md) runs both, and a UEManager over several texts.

`stat_calculators(model_type)` is lm-polygraph's default list (`register_default_stat_calculators`) with
its `GreedyProbsCalculator` replaced by `LensGreedyProbsCalculator`, which returns every statistic the
original does (greedy tokens, log-probabilities, alternatives, texts, likelihoods; hidden states where
asked for) and `attention_all` in the original's layout, so lm-polygraph's estimators run unchanged.
AttentionScore reads the diagonal of a teacher-forced forward's full maps (`forwardpass_attention_weights`,
prompt rows included): `entropy_lens.polygraph.forward.AttentionScore` is lm-polygraph's estimator reading
that diagonal alone, `forwardpass_attention_diagonal`, which `stat_calculators` adds (forward.py).
`estimate_uncertainty` given lm-polygraph's own AttentionScore runs that one (its `layer` and `gen_only`
kept); in a UEManager of your own, lm-polygraph's AttentionScore on a model whose attention is not eager
(which returns no maps) is refused in one line naming `entropy_lens.polygraph.forward.AttentionScore`.
"""

from __future__ import annotations

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.generation import GenerationRecorder
from entropy_lens.results.generation import PROBS
from entropy_lens.settings import check_argument

try:
    from lm_polygraph.stat_calculators.greedy_probs import GreedyProbsCalculator
except ImportError as err:  # pragma: no cover - the extra is missing
    raise ImportError(
        "entropy_lens.polygraph needs lm-polygraph: `make polygraph-env` builds .venv-polygraph with it "
        "(or pip install -e '.[polygraph]' in an environment of your own)"
    ) from err

__all__ = [
    "LensGreedyProbsCalculator",
    "attention_all",
    "estimate_uncertainty",
    "stat_calculators",
    "whitebox_model",
]

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
            live = int(np.isfinite(probs[i]).reshape(N, -1).all(-1).sum())  # the steps with a finite row
            raise EntropyLensError(
                f"text {i}: lm-polygraph kept {c} generated tokens (its end token included), the recorder "
                f"a finite row for {live} of its {N} steps; they must generate with the same end token"
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

    from entropy_lens.polygraph.forward import (
        LensAttentionForwardPassCalculator,
        LensForwardpassDiagonalCalculator,
    )

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
    # lm-polygraph's calculator -> ours in its place (the builder module that makes it, its configuration)
    ours = {
        GreedyProbsCalculator.__name__: (LensGreedyProbsCalculator, BUILDER, None),
        LensAttentionForwardPassCalculator.__base__.__name__: (
            LensAttentionForwardPassCalculator,
            BUILDER + ".forward",
            {"obj": LensAttentionForwardPassCalculator.__name__},
        ),
    }
    for k, sc in enumerate(containers):
        if sc.name in ours:
            obj, builder, cfg = ours[sc.name]
            stats, dependencies = obj.meta_info()
            containers[k] = StatCalculatorContainer(
                obj=obj,
                builder=builder,
                cfg=sc.cfg if cfg is None else cfg,
                stats=stats,
                dependencies=dependencies,
            )
    return containers


def estimate_uncertainty(
    model, estimator, input_text: str, *, tokenizer=None, max_new_tokens: int | None = None
):
    """lm_polygraph.estimate_uncertainty on `stat_calculators`: the estimator's uncertainty of `model`'s
    greedy generation after `input_text`.

    Args:
        model: an lm_polygraph WhiteboxModel, or a Hugging Face causal LM (load_model's `.model`) with its
            `tokenizer`, wrapped in a WhiteboxModel here (module docstring).
        estimator: an lm_polygraph estimator (RAUQ, MaximumSequenceProbability, ...); lm-polygraph's own
            AttentionScore runs as `forward.AttentionScore` (its layer and gen_only kept), which reads the
            diagonal it reads without the maps.
        input_text: the prompt.
        tokenizer: the Hugging Face model's tokenizer (not with a WhiteboxModel, which holds its own).
        max_new_tokens: the most tokens the wrapped model writes (None: lm-polygraph's default, 100); a
            WhiteboxModel's are its `generation_parameters.max_new_tokens`.

    Returns:
        UncertaintyOutput: lm-polygraph's, as its own function returns it.

    Raises:
        EntropyLensError: a model that is neither, a Hugging Face model without its tokenizer, or
            `tokenizer`/`max_new_tokens` given with a WhiteboxModel.
    """
    import importlib

    from lm_polygraph.estimators.attention_score import AttentionScore as PolygraphAttentionScore

    from entropy_lens.polygraph.forward import AttentionScore

    model = whitebox_model(model, tokenizer, max_new_tokens)
    if isinstance(estimator, PolygraphAttentionScore) and not isinstance(estimator, AttentionScore):
        estimator = AttentionScore(layer=estimator.layer, gen_only=estimator.gen_only)
    polygraph = importlib.import_module("lm_polygraph.utils.estimate_uncertainty")
    own = polygraph.register_default_stat_calculators
    polygraph.register_default_stat_calculators = stat_calculators
    try:
        return polygraph.estimate_uncertainty(model, estimator, input_text)
    finally:
        polygraph.register_default_stat_calculators = own


def whitebox_model(model, tokenizer=None, max_new_tokens: int | None = None):
    """`model` as lm-polygraph's WhiteboxModel: a WhiteboxModel as it is; a Hugging Face causal LM wrapped
    with a copy of `tokenizer` prepared as WhiteboxModel.from_pretrained prepares its own (padding on the
    left, the end token as padding where there is none), offline.

    Args:
        model: a WhiteboxModel, or a transformers PreTrainedModel that generates.
        tokenizer: the Hugging Face model's tokenizer (None with a WhiteboxModel).
        max_new_tokens: the wrapped model's generation_parameters.max_new_tokens (None: lm-polygraph's).

    Returns:
        WhiteboxModel: the model estimate_uncertainty and a UEManager take.

    Raises:
        EntropyLensError: in one line, naming WhiteboxModel, for anything else.
    """
    import copy

    from lm_polygraph import WhiteboxModel
    from lm_polygraph.utils.generation_parameters import GenerationParameters
    from transformers import PreTrainedModel

    if isinstance(model, WhiteboxModel):
        given = [
            name
            for name, v in (("tokenizer", tokenizer), ("max_new_tokens", max_new_tokens))
            if v is not None
        ]
        if given:
            raise EntropyLensError(
                f"{' and '.join(given)} given with a WhiteboxModel, which holds its own (its tokenizer, "
                "its generation_parameters.max_new_tokens): set them there, or pass the Hugging Face model"
            )
        return model
    fix = (
        "pass lm_polygraph's WhiteboxModel(model, tokenizer, model_path=NAME), or the Hugging Face model "
        "with tokenizer= (load_model's .model and .tokenizer)"
    )
    if not isinstance(model, PreTrainedModel) or not hasattr(model, "generate"):
        raise EntropyLensError(f"model is {type(model).__name__}, not a model lm-polygraph runs; {fix}")
    if tokenizer is None:
        raise EntropyLensError(
            f"{type(model).__name__} needs its tokenizer to be wrapped in a WhiteboxModel; {fix}"
        )
    if max_new_tokens is not None:
        check_argument("max_new_tokens", max_new_tokens, int, {"at_least": 1}, example=32)
    tokenizer = copy.deepcopy(tokenizer)  # the caller's is left as it was
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    parameters = GenerationParameters()  # a fresh one: WhiteboxModel's default is shared by every model
    if max_new_tokens is not None:
        parameters.max_new_tokens = max_new_tokens
    name = getattr(model, "name_or_path", None) or type(model).__name__
    return WhiteboxModel(model, tokenizer, model_path=name, generation_parameters=parameters)
