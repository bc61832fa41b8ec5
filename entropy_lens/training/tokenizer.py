"""A byte-level BPE tokenizer trained on our own corpus (the `tokenizers` package, no download).

Byte-level means every string encodes (no unknown token); the one special token,
`<|endoftext|>`, is the document separator the packer puts between documents, and is declared
as bos and eos so `data.separator_id` finds it. Training gives the same vocabulary for the
same text (`tests/training/test_training.py` checks it), so the NoPE and RoPE runs of a recipe share one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = ["SEPARATOR", "train_bpe"]

SEPARATOR = "<|endoftext|>"


def train_bpe(documents: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with `vocab_size` entries (256 bytes + merges + separator)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[SEPARATOR],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SEPARATOR, eos_token=SEPARATOR, model_max_length=1 << 30
    )
