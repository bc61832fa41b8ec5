"""The passkey trials of `entropy-lens passkey` as lm-eval tasks: `entropy_lens_passkey_<len>`.

Each task is one window length W (harness/tasks/entropy_lens_passkey_<W>.yaml; `passkey_length` in its
metadata) and holds that length's `depths` × `keys` trials, drawn exactly as runs/passkey.py draws them:
trial (k, t) seeds its generator with (seed, W, k, t), draws a 5-digit key and builds its prompt with
data/passkey.py's `passkey_prompt` at depth k/depths. A document is the prompt as text (the tokenizer's
decoding of the prompt's tokens, checked to tokenize back to exactly those tokens, so any backend reads
the same prompt), the key, and the number of tokens of the answer; lm-eval generates greedily that many
tokens (`PasskeyTask`: max_gen_toks per document) and `exact_match` is 1 where they read as the key:
the accuracy `entropy-lens passkey` reports for W, on the same trials.

The tokenizer comes from the tasks' metadata, which lm-eval fills with the model's arguments (and
`--metadata`): `tokenizer`, else `pretrained`, as the toolkit names checkpoints (bundled names, folders,
.gguf files, Hub ids; `revision`, `trust_remote_code`), so the tasks run on any lm-eval model whose
tokenizer that is. `passkey_depths`, `passkey_keys` and `passkey_seed` default to `entropy-lens
passkey`'s (PasskeyConfig). Each value is typed and checked as harness/config.py's
`task_metadata_values` does (trust_remote_code as a boolean, never by truthiness), in one line that
names the metadata key. The model must accept W tokens (lm-eval cuts longer contexts: pass
max_length=W to the entropy-lens model, --max-length to `entropy-lens eval`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from lm_eval.api.task import ConfigurableTask

from entropy_lens.data.passkey import check_tokenizer, passkey_prompt, random_key
from entropy_lens.errors import EntropyLensError
from entropy_lens.harness.config import task_metadata_values
from entropy_lens.models import checkpoint_tokenizer
from entropy_lens.runs.configs import PasskeyConfig

__all__ = [
    "PASSKEY_TASK",
    "PasskeyTask",
    "passkey_dataset",
    "passkey_documents",
    "passkey_length",
    "passkey_result",
]

PASSKEY_TASK = "entropy_lens_passkey_"  # + the window length W: the tasks' names
DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(PasskeyConfig) if f.name in ("depths", "keys", "seed")
}


def passkey_length(task: str) -> int | None:
    """W of a task named entropy_lens_passkey_<W>, else None."""
    tail = task.removeprefix(PASSKEY_TASK)
    return int(tail) if tail != task and tail.isdigit() else None


def passkey_documents(tokenizer, *, length: int, depths: int, keys: int, seed: int) -> list[dict]:
    """The trials of window length `length`, in `entropy-lens passkey`'s order (depth, then key)."""
    check_tokenizer(tokenizer)
    docs = []
    for k in range(depths):
        for t in range(keys):
            rng = np.random.default_rng([seed, length, k, t])
            key = random_key(rng)
            prompt = passkey_prompt(
                tokenizer, length=length, depth=k / depths, key=key, rng=rng, width=1 / depths
            )
            text = tokenizer.decode(prompt.ids.tolist(), skip_special_tokens=True)
            back = list(tokenizer(text)["input_ids"])  # as lm-eval's hf model tokenizes a context
            if back != prompt.ids.tolist():
                raise EntropyLensError(
                    f"the passkey prompt of key {key} at length {length} does not tokenize back to its own "
                    f"tokens as text ({len(back)} tokens for {len(prompt.ids)}), so an lm-eval model would read "
                    "another prompt than `entropy-lens passkey`; use `entropy-lens passkey` for this tokenizer"
                )
            docs.append(
                {
                    "context": text,
                    "answer": tokenizer.decode(prompt.answer.tolist()),
                    "key": key,
                    "answer_tokens": len(prompt.answer),
                    "length": length,
                    "depth": k / depths,
                    "trial": t,
                    "position": prompt.needle_start,
                }
            )
    return docs


def passkey_dataset(**metadata) -> dict:
    """lm-eval's `custom_dataset` of a passkey task: {"test": the trials} (module docstring)."""
    import datasets

    metadata = task_metadata_values(metadata, where="metadata")
    name = metadata.get("tokenizer") or metadata.get("pretrained")
    if not name:
        raise EntropyLensError(
            "the passkey tasks build their prompts with the model's tokenizer: pass the model as "
            'pretrained=CKPT in --model_args, or --metadata \'{"tokenizer": "CKPT"}\''
        )
    settings = {key: metadata.get(f"passkey_{key}", default) for key, default in DEFAULTS.items()}
    length = metadata.get("passkey_length")
    if length is None:
        raise EntropyLensError(
            "a passkey task needs its window length (passkey_length in its metadata): run the tasks "
            f"{PASSKEY_TASK}<W> (harness/tasks/), or write one like them for another W"
        )
    config = PasskeyConfig(model=str(name), lengths=(length,), **settings)  # types and ranges checked
    tokenizer = checkpoint_tokenizer(
        str(name),
        revision=metadata.get("revision"),
        trust_remote_code=metadata.get("trust_remote_code") is True,  # parsed: True, False or None
    )
    docs = passkey_documents(
        tokenizer, length=config.lengths[0], depths=config.depths, keys=config.keys, seed=config.seed
    )
    return {"test": datasets.Dataset.from_list(docs)}


def passkey_result(doc: dict, results: list[str]) -> dict:
    """lm-eval's `process_results`: 1.0 where the generated answer reads as the key."""
    return {"exact_match": float(results[0].strip() == str(doc["key"]))}


class PasskeyTask(ConfigurableTask):
    """A passkey task: lm-eval's own, but each trial generates as many tokens as its answer has (as
    `entropy-lens passkey` decodes), not a fixed max_gen_toks for every document."""

    def __init__(self, config: dict | None = None) -> None:
        # lm-eval hands a `class:` task its whole YAML, the class's own key included
        super().__init__(config={k: v for k, v in (config or {}).items() if k != "class"})

    def construct_requests(self, doc: dict, ctx, **kwargs):
        request = super().construct_requests(doc, ctx, **kwargs)
        context, generation, *rest = request.arguments
        request.arguments = (context, {**generation, "max_gen_toks": int(doc["answer_tokens"])}, *rest)
        return request
