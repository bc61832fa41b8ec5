"""Capture: the `entropy_lens` attention function, the recorder and its host sums, per-position loss, and
a sequence sharded over processes (--context-parallel: shards.py, context_parallel.py)."""

from entropy_lens.capture.attention import ATTN_NAME, register
from entropy_lens.capture.loss import check_logits, forward_hidden, next_token_nll
from entropy_lens.capture.own_attention import check_supported
from entropy_lens.capture.recorder import EntropyRecorder, ScaleSession
from entropy_lens.capture.schedule import Schedule, parse_schedule
from entropy_lens.capture.shardable import check_shardable
from entropy_lens.capture.shards import SequenceShards, ShardedSequence

__all__ = [
    "ATTN_NAME",
    "EntropyRecorder",
    "ScaleSession",
    "Schedule",
    "SequenceShards",
    "ShardedSequence",
    "check_logits",
    "check_shardable",
    "check_supported",
    "forward_hidden",
    "next_token_nll",
    "parse_schedule",
    "register",
]
