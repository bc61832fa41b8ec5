"""Attention while the model writes: the statistics of every generated token (recorder.py), saved as
results/generation.py's GenerationResult."""

from entropy_lens.generation.recorder import GenerationRecorder
from entropy_lens.results.generation import GenerationResult

__all__ = ["GenerationRecorder", "GenerationResult"]
