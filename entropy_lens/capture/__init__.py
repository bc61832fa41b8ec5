"""Capture: the `entropy_lens` attention function, the recorder and its host sums, per-position loss."""

from entropy_lens.capture.attention import ATTN_NAME, register
from entropy_lens.capture.loss import forward_hidden, next_token_nll
from entropy_lens.capture.recorder import EntropyRecorder, ScaleSession

__all__ = ["ATTN_NAME", "EntropyRecorder", "ScaleSession", "forward_hidden", "next_token_nll", "register"]
