"""The batch of each training step (`training_batch`): random windows of the packed training text, the
last of them ending in passkey documents where the recipe asks for them.

The batch of step t is drawn from (seed, t) alone (`numpy.random.default_rng`), so it does not depend on
what ran before: a resumed run draws the same batches, and the NoPE and RoPE runs of one recipe see the
same ones.
"""

from __future__ import annotations

import numpy as np

from entropy_lens.training.recipe import TinyRecipe

__all__ = ["training_batch"]


def training_batch(recipe: TinyRecipe, stream: np.ndarray, tokenizer, step: int) -> np.ndarray:
    """(batch, L + 1) token ids of step `step`: random windows of the stream, the last
    round(passkey_share · batch) of them ending in a passkey document (in the passkey phase, or in every
    step without one). A document has a random length n in [L/2, L + 1] (prompt then answer, a random
    key at a random depth) and follows the window's first L + 1 − n tokens of text and a separator, so
    the answer's position varies: with the answer always at the window's end, the RoPE model learned to
    rely on where it sits, and answered the key rotated one place at any other length. Drawn by (seed,
    step) alone, as the windows."""
    from entropy_lens.data import random_windows
    from entropy_lens.data.passkey import passkey_prompt, random_key, shortest_prompt

    windows = random_windows(stream, recipe.train_len, recipe.batch, recipe.seed, step)
    pretraining = recipe.passkey_steps and step < recipe.steps
    n = 0 if pretraining else round(recipe.passkey_share * recipe.batch)
    rng = np.random.default_rng([recipe.seed, step, 1])
    width = recipe.train_len + 1
    for row in range(recipe.batch - n, recipe.batch):
        key = random_key(rng)
        shortest = min(
            max(width // 2, shortest_prompt(tokenizer, key)), width
        )  # too long: passkey_prompt says
        length = int(rng.integers(shortest, width + 1))
        prompt = passkey_prompt(tokenizer, length=length, depth=rng.uniform(), key=key, rng=rng, width=0.0)
        windows[row, width - length :] = np.concatenate([prompt.ids, prompt.answer])
        if length < width:  # the separator that ends the text before a document
            windows[row, width - length - 1] = tokenizer.eos_token_id
    return windows
