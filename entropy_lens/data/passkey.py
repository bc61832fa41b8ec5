"""Passkey prompts: the Landmark-Attention task as the paper runs it (Figure 6), built in tokens.

    prompt = passkey_prompt(tokenizer, length=512, depth=0.3, key=48213, rng=rng)
    prompt.ids            # int64 (length − len(prompt.answer),): instruction, filler, the needle
                          # sentence, filler, the question
    prompt.answer         # the answer's token ids (" 48213" as the tokenizer writes it after "is")
    prompt.key_positions  # the token positions of the key in the needle (both times it is said)

The prompt is the task instruction, the filler block "The grass is green. The sky is blue. The sun is
yellow. Here we go. There and back again." repeated, the needle "The pass key is K. Remember it. K is
the pass key." at a filler-block boundary, more filler, and the question "What is the pass key? The
pass key is". Its total is `length` minus the answer's tokens, so prompt and answer fill the window.
The needle goes to the filler-sentence boundary nearest a target drawn uniformly from
[depth·n, (depth + 0.1)·n) of the filler's n tokens (sentences rather than the paper's whole blocks, so
that a window of a tiny model's few hundred tokens still has distinct depths) (the paper's 10 depths; `width` for others), clamped so that the needle, the instruction and the question fit. Pieces are tokenised
separately and concatenated, so the key's positions are exact; a tokenizer that does not write a piece
back as its text is refused (`check_tokenizer`). A length above MAX_TOKENS (settings/declare.py) is refused
before the filler is built, so a prompt never grows beyond a length that was asked for and checked.
Only numpy is imported.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import MAX_TOKENS, check_range

__all__ = [
    "FILLER",
    "INSTRUCTION",
    "QUESTION",
    "PasskeyPrompt",
    "check_tokenizer",
    "passkey_prompt",
    "random_key",
    "shortest_prompt",
]

INSTRUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there."
)
FILLER_SENTENCES = (
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
)
FILLER = "".join(f" {sentence}" for sentence in FILLER_SENTENCES)  # the paper's filler block
QUESTION = " What is the pass key? The pass key is"
KEY_DIGITS = 5


@dataclass(frozen=True)
class PasskeyPrompt:
    ids: np.ndarray  # int64 (length − len(answer),)
    answer: np.ndarray  # int64: the key's tokens as they follow the question
    key_positions: np.ndarray  # int64: where the key's tokens sit in `ids` (both mentions)
    key: int
    depth: float
    needle_start: int  # the needle sentence's first token
    needle_stop: int  # the token after the needle sentence's last: the needle is [needle_start, needle_stop)


def random_key(rng: np.random.Generator) -> int:
    """A uniform 5-digit key, 10000..99999."""
    return int(rng.integers(10 ** (KEY_DIGITS - 1), 10**KEY_DIGITS))


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_tokenizer(tokenizer) -> None:
    """EntropyLensError when the tokenizer cannot write the task: a piece that does not decode back to
    its own text (an unknown character, say) would make a different task than the one scored."""
    for text in (INSTRUCTION, FILLER, QUESTION, " 12345", " The pass key is", ". Remember it."):
        ids = _encode(tokenizer, text)
        back = tokenizer.decode(ids)
        if not ids or back.strip() != text.strip():
            raise EntropyLensError(
                f"the tokenizer cannot express the passkey task: {text.strip()[:40]!r} comes back as "
                f"{back.strip()[:40]!r}; use a model whose tokenizer writes plain English text and digits"
            )


def _bos(tokenizer) -> list[int]:
    """[bos] when the tokenizer starts its sequences with one, else []."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return []
    with_special = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    return [bos] if with_special and with_special[0] == bos else []


def _pieces(tokenizer, key: int) -> tuple[list[int], list[list[int]], list[int], list[int]]:
    """(instruction, the needle's parts, question, answer) in tokens."""
    head = _bos(tokenizer) + _encode(tokenizer, INSTRUCTION)
    said = _encode(tokenizer, f" {key}")  # the key inside the needle, after "is" as in the answer
    parts = [_encode(tokenizer, " The pass key is"), said, _encode(tokenizer, ". Remember it."), said]
    parts.append(_encode(tokenizer, " is the pass key."))
    return head, parts, _encode(tokenizer, QUESTION), said


def shortest_prompt(tokenizer, key: int) -> int:
    """The fewest tokens a prompt of `key` and its answer take with `tokenizer` (no filler)."""
    head, parts, question, answer = _pieces(tokenizer, key)
    return len(head) + sum(map(len, parts)) + len(question) + len(answer)


def passkey_prompt(
    tokenizer, *, length: int, depth: float, key: int, rng: np.random.Generator, width: float = 0.1
) -> PasskeyPrompt:
    """The prompt of one trial (see the module docstring; the needle's target is drawn from
    [depth, depth + width) of the filler); EntropyLensError when it cannot fit."""
    length = operator.index(length)
    check_range(length, label="--lens", at_least=1, at_most=MAX_TOKENS)  # before the filler grows
    check_range(depth, label="depth", at_least=0, at_most=1)
    head, parts, question, answer = _pieces(tokenizer, key)
    sentences = [_encode(tokenizer, f" {sentence}") for sentence in FILLER_SENTENCES]
    needle = [t for part in parts for t in part]
    total = length - len(answer)
    filler = total - len(head) - len(needle) - len(question)
    if filler < 0:
        need = shortest_prompt(tokenizer, key)
        raise EntropyLensError(
            f"a passkey prompt needs at least {need} tokens with this tokenizer (instruction, needle, question "
            f"and answer); --lens {length} is too short: pass lengths of {need} or more"
        )
    stream, ends = [], [0]  # the filler repeated, and where each of its sentences ends
    while len(stream) <= filler:
        for sentence in sentences:
            stream += sentence
            ends.append(len(stream))
    target = rng.uniform(depth * filler, min(depth + width, 1.0) * filler)
    before = min((e for e in ends if e <= filler), key=lambda e: abs(e - target))  # a sentence boundary
    ids = head + stream[:before] + needle + stream[: filler - before] + question
    start = len(head) + before
    first = start + len(parts[0])
    second = first + len(answer) + len(parts[2])
    positions = [*range(first, first + len(answer)), *range(second, second + len(answer))]
    return PasskeyPrompt(
        ids=np.asarray(ids, dtype=np.int64),
        answer=np.asarray(answer, dtype=np.int64),
        key_positions=np.asarray(positions, dtype=np.int64),
        key=key,
        depth=depth,
        needle_start=start,
        needle_stop=start + len(needle),
    )
