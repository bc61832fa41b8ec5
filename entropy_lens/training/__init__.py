"""Training the project's own tiny models (the embedded default): tokenizer and model recipe."""

from entropy_lens.training.tiny import TinyRecipe, build_model, train_tiny
from entropy_lens.training.tokenizer import train_bpe

__all__ = ["TinyRecipe", "build_model", "train_bpe", "train_tiny"]
