"""`EntropyLensLM`: a checkpoint and its variant as an lm-evaluation-harness model, registered as
"entropy-lens".

    lm = EntropyLensLM(pretrained="tiny-nope", scale=1.2, device="cpu")   # or the same as --model_args
    lm_eval.simple_evaluate(model=lm, tasks=["hellaswag"])

It is lm-eval's own Hugging Face model (`HFLM`) given the model this toolkit loads, so requests are
batched, tokenised, truncated and scored by lm-eval's code, unchanged: loglikelihood,
loglikelihood_rolling and generate_until. What differs is the model and where its attention runs:

1. the checkpoint loads as `scan` loads it (runs/variants.py: bundled names, folders, GGUF files, Hub ids;
   --nope, --rope-scaling, --revision), and
2. each forward lm-eval makes (`_model_call`: loglikelihoods; `_model_generate`: generation) runs inside
   the variant's `ScaleSession`, i.e. through the toolkit's attention function at λ_h = s_h/√d (--scale,
   --head-scales, the checkpoint's own λ(h)) and the position schedule (--scale-schedule), the same
   function `scan`, `ppl` and `passkey` run. Where nothing is scaled that function runs transformers'
   own sdpa attention, so an unmodified checkpoint scores exactly as lm-eval's stock `hf` model.

The settings are HarnessModelConfig's (harness/config.py; `pretrained` names the checkpoint), `threads`
(as every command's --threads), and those of HFLM's arguments that mean something for a model that is
already built (HF_ARGS, passed on unchanged; its booleans, HF_BOOLEANS, parsed as harness/config.py's
`parse_bool` parses every boolean, never by truthiness). Any other argument is refused: HFLM would drop
it silently.
`entropy-lens eval` builds it from its flags (`from_config`).
"""

from __future__ import annotations

import contextlib
import logging

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from entropy_lens.harness.config import HarnessModelConfig, parse_bool
from entropy_lens.runs.threads import set_threads
from entropy_lens.runs.variants import ModelVariant, load_model_variant

__all__ = ["HF_ARGS", "HF_BOOLEANS", "MODEL_NAME", "EntropyLensLM"]

MODEL_NAME = "entropy-lens"  # lm-eval's --model
# HFLM's arguments that apply to a model passed in built (the rest choose how HFLM would load one)
HF_ARGS = (
    "batch_size",
    "max_batch_size",
    "truncation",
    "logits_cache",
    "add_bos_token",
    "prefix_token_id",
    "softmax_dtype",
    "mixed_precision_dtype",
    "think_end_token",
    "enable_thinking",
    "chat_template_args",
)
HF_BOOLEANS = ("truncation", "logits_cache", "add_bos_token", "enable_thinking")  # None: HFLM's default
# HFLM's warnings about a model passed in built, which is what this class does on purpose
BUILT_MODEL_WARNINGS = (
    "`pretrained` model kwarg is not of type `str`",
    "Passed an already-initialized model",
)


@register_model(MODEL_NAME)
class EntropyLensLM(HFLM):
    """lm-eval's HF model over a checkpoint as the toolkit loads it, every forward inside its variant's
    ScaleSession (module docstring)."""

    def __init__(self, pretrained: str | None = None, threads: int | None = None, **args) -> None:
        hf_args = {name: args.pop(name) for name in list(args) if name in HF_ARGS}
        for name in HF_BOOLEANS:
            if hf_args.get(name) is not None:
                hf_args[name] = parse_bool(hf_args[name], name=f"--model_args {name}")
        config = HarnessModelConfig.from_model_args(
            {"pretrained": pretrained, **args}, also=("threads", *HF_ARGS)
        )
        config.check()
        if threads is not None:
            set_threads(threads)
        self.harness_config = config
        self.variant: ModelVariant = load_model_variant(config)
        self.attention_paths: set[str] = set()  # capture/paths.py's names of what ran, over all forwards
        quiet = _Drop(BUILT_MODEL_WARNINGS)
        hf_logger = logging.getLogger(HFLM.__module__)
        hf_logger.addFilter(quiet)
        try:
            super().__init__(
                pretrained=self.variant.lm.model,
                tokenizer=self.variant.lm.tokenizer,
                max_length=config.max_length,
                **hf_args,
            )
        finally:
            hf_logger.removeFilter(quiet)

    @classmethod
    def from_config(cls, config: HarnessModelConfig, **hf_args) -> EntropyLensLM:
        """The model of `config` (as `entropy-lens eval`'s flags give it); `hf_args`: HF_ARGS."""
        return cls(**config.model_args(), **hf_args)

    def _model_call(self, inps, attn_mask=None, labels=None):
        with self._variant():
            return super()._model_call(inps, attn_mask=attn_mask, labels=labels)

    def _model_generate(self, context, max_length, stop, **generation_kwargs):
        with self._variant():
            return super()._model_generate(context, max_length, stop, **generation_kwargs)

    @contextlib.contextmanager
    def _variant(self):
        """The variant's ScaleSession around one of lm-eval's forwards; what ran is kept."""
        scaled = self.variant.session()
        try:
            with scaled:
                yield
        finally:
            self.attention_paths |= scaled.session.paths

    def get_model_info(self) -> dict:
        """What lm-eval's results "config" records about the model (HFLM's asks the Hub for a commit:
        here the toolkit's facts, offline)."""
        facts = self.variant.facts()
        return {
            "model_num_parameters": self.model.num_parameters(),
            "model_dtype": facts["dtype"],
            "model_revision": self.harness_config.revision,
            "model_sha": "",
            "entropy_lens_model": facts,
        }


class _Drop(logging.Filter):
    """Drops the log records that start with one of `prefixes`."""

    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)
