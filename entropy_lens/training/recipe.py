"""The recipe of a tiny model: everything that determines its trained weights (`TinyRecipe`: each field
is a train-tiny flag, and the whole recipe is recorded in the model's config and training.json) and the
learning rate of each step it implies (`lr_at`).

The recipe mirrors TinyLlama in miniature: Llama blocks (SwiGLU, RMSNorm, untied embeddings) with
6 attention heads of dimension 32 (multi-head by default; `kv_heads=2` gives TinyLlama's grouped-
query attention, with which a uniform scale barely helped NoPE beyond 2L: see models/tiny/README.md),
a byte-level BPE tokenizer trained on the five Austen novels that are not held out, and a short
training length L. NoPE and RoPE runs
of one recipe see the same batches in the same order from the same initial weights, so any
difference between them is the position encoding.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import MAX_COUNT, MAX_SEED, MAX_TOKENS, Checked, setting

__all__ = ["TinyRecipe", "lr_at"]

_KINDS = ("nope", "rope", "alibi")


@dataclass(frozen=True)
class TinyRecipe(Checked):
    """Everything that determines the trained weights (recorded in the model's config)."""

    kind: str = setting(
        "nope",
        choices=_KINDS,
        help="position encoding: nope or rope (Llama blocks), alibi (BLOOM blocks: ALiBi, LayerNorm, "
        "GELU MLP of 4 x hidden, biases; --intermediate and --kv-heads do not apply)",
    )
    train_len: int = setting(128, at_least=2, at_most=MAX_TOKENS, help="L, tokens per training sequence")
    hidden: int = setting(192, at_least=2, at_most=1 << 16, help="hidden size")
    intermediate: int = setting(512, at_least=1, at_most=1 << 18, help="MLP intermediate size")
    layers: int = setting(4, at_least=1, at_most=1024, help="decoder layers")
    heads: int = setting(6, at_least=1, at_most=1024, help="query heads")
    # multi-head: with 2 (GQA) a uniform scale barely helps NoPE (docs/internals/layout.md)
    kv_heads: int = setting(6, at_least=1, at_most=1024, help="key/value heads (a divisor of --heads)")
    vocab: int = setting(2048, at_least=1, at_most=1 << 20, help="byte-level BPE vocabulary size")
    rope_theta: float = setting(10000.0, above=0, help="RoPE base (the rope kind)")
    data: str = setting(
        "austen-minus:persuasion", help="training text; the held-out novel is the evaluation text"
    )
    batch: int = setting(32, at_least=1, at_most=MAX_COUNT, help="sequences per optimiser step")
    steps: int = setting(1500, at_least=1, at_most=MAX_COUNT, help="optimiser steps")
    lr: float = setting(2e-3, above=0, help="peak AdamW learning rate")
    warmup: int = setting(
        100,
        at_least=0,
        at_most=MAX_COUNT,
        help="linear warm-up steps, then cosine decay to min_lr_ratio x lr",
    )
    min_lr_ratio: float = setting(0.1, at_least=0, at_most=1, help="final learning rate / peak")
    weight_decay: float = setting(0.1, at_least=0, help="AdamW weight decay")
    grad_clip: float = setting(1.0, above=0, help="gradient-norm clip")
    seed: int = setting(0, at_least=0, at_most=MAX_SEED, help="initialisation and batch order")
    passkey_share: float = setting(
        0.0,
        at_least=0,
        at_most=1,
        help="share of each batch's windows that end in a passkey document of L/2 to L+1 tokens "
        "(data/passkey.py: random key and depth), so the model can learn the task inside L: in the steps "
        "of --passkey-steps when it is set, else in every step",
    )
    passkey_steps: int = setting(
        0,
        at_least=0,
        at_most=MAX_COUNT,
        help="steps of a passkey phase after --steps: a fresh AdamW at the constant --passkey-lr on batches "
        "with --passkey-share passkey documents (0: no phase)",
    )
    passkey_lr: float = setting(2e-4, above=0, help="learning rate of the passkey phase (--passkey-steps)")

    def check(self) -> None:
        if self.kind not in _KINDS:
            raise EntropyLensError(f"--kind {self.kind!r} is not known; use nope, rope or alibi")
        if not 0 <= self.passkey_share <= 1:
            raise EntropyLensError(f"--passkey-share must be in [0, 1] (got {self.passkey_share})")
        for name in ("train_len", "hidden", "intermediate", "layers", "heads", "kv_heads", "batch", "steps"):
            if getattr(self, name) < 1:
                raise EntropyLensError(f"{name} must be at least 1 (got {getattr(self, name)})")
        if self.hidden % self.heads:
            raise EntropyLensError(
                f"--hidden {self.hidden} must be a multiple of --heads {self.heads}; change one of them"
            )
        if self.kind != "alibi" and self.heads % self.kv_heads:  # BLOOM blocks have a key/value per head
            raise EntropyLensError(
                f"--heads {self.heads} must be a multiple of --kv-heads {self.kv_heads}; change one of them"
            )
        if (self.hidden // self.heads) % 2:
            raise EntropyLensError(
                f"--hidden {self.hidden} / --heads {self.heads} = head size {self.hidden // self.heads} must be even "
                "for rotary embeddings; change one of them"
            )
        if self.vocab < 258:
            raise EntropyLensError(
                f"--vocab {self.vocab} is too small: a byte-level BPE needs 256 bytes + 2; pass --vocab 258 or more"
            )
        if not 0 <= self.warmup <= self.steps:
            raise EntropyLensError(
                f"--warmup {self.warmup} must lie in 0..--steps {self.steps}; pass --warmup {min(self.steps, max(self.warmup, 0))} "
                "or more --steps"
            )
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1):
            raise EntropyLensError("need --lr > 0 and 0 <= --min-lr-ratio <= 1")
        if self.passkey_steps < 0 or self.passkey_lr <= 0:
            raise EntropyLensError("need --passkey-steps >= 0 and --passkey-lr > 0")
        if self.passkey_steps and not self.passkey_share:
            raise EntropyLensError(
                "--passkey-steps needs a --passkey-share above 0 (the phase's passkey documents)"
            )

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the run: --steps, then the passkey phase."""
        return self.steps + self.passkey_steps

    def pretraining(self) -> TinyRecipe:
        """The recipe of this run's first --steps steps as a run of its own (without the passkey phase):
        what a folder given to --init-from must have been trained by."""
        if not self.passkey_steps:
            return self
        plain = TinyRecipe()
        return dataclasses.replace(
            self, passkey_share=plain.passkey_share, passkey_steps=0, passkey_lr=plain.passkey_lr
        )

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.train_len


def lr_at(recipe: TinyRecipe, step: int) -> float:
    """Learning rate of step `step` (0-based): linear warm-up, then cosine to min_lr_ratio * lr; the
    constant passkey_lr in the passkey phase."""
    if step >= recipe.steps:
        return recipe.passkey_lr
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    progress = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    floor = recipe.min_lr_ratio
    return recipe.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))
