"""The sharded attention (capture/context_parallel.py) in one process: P threads play the ranks, exchanging K and
V through `ThreadExchange`, the exchange's public seam (torchrun runs the same code with
torch.distributed's all_gather: tests/runs/test_context_parallel.py). Every supported architecture's sharded
forward equals its one-process forward: hidden states, and every row statistic where the recorder puts
it; with left and right padding (the global 2-D mask rebuilt as key padding), and with scales and a
schedule."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, build, ids_and_mask

from entropy_lens.capture import EntropyRecorder, Schedule, forward_hidden
from entropy_lens.capture.shardable import check_shardable, takes_positions
from entropy_lens.capture.shards import SequenceShards, ShardedSequence
from entropy_lens.errors import EntropyLensError

SHARDABLE = sorted(name for name in SUPPORTED if name != "falcon (alibi=True)")


class ThreadExchange:
    """The all-gather of `size` threads of one process, thread r being rank r."""

    def __init__(self, size: int):
        self.barrier = threading.Barrier(size, timeout=120)
        self.slots: list[torch.Tensor | None] = [None] * size

    def of(self, rank: int):
        def exchange(local, lengths):
            self.slots[rank] = local
            self.barrier.wait()
            gathered = list(self.slots)
            self.barrier.wait()  # nobody overwrites a slot before everyone has read it
            return gathered

        return exchange


def sharded_forward(model, ids, processes: int, mask=None, **recorder):
    """(hidden (B, T, hidden), the recorder's sums added over the ranks) of `model` on `ids` sharded over
    `processes` threads, each with its own replica of the model."""
    B, T = ids.shape
    exchange = ThreadExchange(processes)
    replicas = [copy.deepcopy(model) for _ in range(processes)]
    done, errors = [None] * processes, []

    def rank(r: int) -> None:
        try:
            shards = SequenceShards(r, processes, T)
            replica, positions = replicas[r], shards.positions()
            sequence = ShardedSequence(shards, exchange.of(r), mask)
            kwargs = {"position_ids": positions[None]} if takes_positions(replica) else {}
            with EntropyRecorder(replica, context=sequence, **recorder) as rec, torch.no_grad():
                hidden = forward_hidden(replica, ids[:, positions], **kwargs)
            done[r] = (positions, hidden, all_sums(rec))
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread below
            errors.append(err)
            exchange.barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    hidden = torch.empty(B, T, done[0][1].shape[-1])
    sums = {}
    for positions, h, rank_sums in done:
        hidden[:, positions] = h
        for name, values in rank_sums.items():
            total = sums.setdefault(name, np.zeros(values.shape[:-1] + (T,), dtype=values.dtype))
            total[..., : values.shape[-1]] += values
    return hidden, sums


def one_process(model, ids, mask=None, **recorder):
    with EntropyRecorder(model, **recorder) as rec, torch.no_grad():
        hidden = forward_hidden(model, ids, **({} if mask is None else {"attention_mask": mask}))
    return hidden, all_sums(rec)


def all_sums(rec) -> dict:
    """The recorder's row sums and its key sums (attention received, `key:` before each name)."""
    keys = rec.key_sums if rec.session.measure.key_stats else {}
    return rec.sums | {f"key:{name}": values for name, values in keys.items()}


def assert_same(sharded, one, mask=None):
    (hidden, sums), (hidden_1, sums_1) = sharded, one
    real = torch.ones(hidden.shape[:2], dtype=torch.bool) if mask is None else mask.bool()
    torch.testing.assert_close(hidden[real], hidden_1[real], atol=2e-4, rtol=1e-4)
    n = sums_1["count"].shape[-1]
    assert set(sums) == set(sums_1)
    np.testing.assert_array_equal(sums["count"][:n], sums_1["count"])
    assert not sums["count"][n:].any()
    for name in sums_1:
        np.testing.assert_allclose(sums[name][..., :n], sums_1[name], atol=2e-5, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("model_type", SHARDABLE)
def test_every_architecture_sharded_equals_one_process(model_type):
    model = build(model_type, SUPPORTED[model_type][0])
    check_shardable(model)
    ids, _ = ids_and_mask("none", T=19)  # 2P = 4 does not divide 19
    stats = ("entropy", "sink_mass", "max_prob", "distance", "first_mass", "recent_mass")
    for fused in ("off", "on"):  # recent_mass: each row's last 3 keys, global positions on every rank
        options = {"stats": stats, "first_keys": 2, "recent_keys": 3, "fused": fused}
        assert_same(sharded_forward(model, ids, 2, **options), one_process(model, ids, **options))


@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize("model_type", ["llama", "bloom", "gpt_oss", "qwen2"])
def test_padding_is_rebuilt_from_the_whole_sequences_mask(model_type, padding):
    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask(padding, T=17, pad=5)
    for fused in ("off", "on"):  # first_mass: each row's first K real keys, global positions on every rank
        options = {"fused": fused, "stats": ("entropy", "first_mass", "recent_mass"), "first_keys": 3}
        options["recent_keys"] = 4
        sharded = sharded_forward(model, ids, 3, mask, **options)
        assert_same(sharded, one_process(model, ids, mask, **options), mask)


@pytest.mark.parametrize("padding", ["none", "left"])
@pytest.mark.parametrize("model_type", ["llama", "gpt_oss", "bloom", "gemma2"])
def test_attention_received_sharded_equals_one_process(model_type, padding):
    """Keys on one rank receive from queries on later ranks: every key statistic, with a query window (the
    last rows of the whole sequence, not of a chunk), equals the one-process arrays over 3 ranks."""
    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask(padding, T=19, pad=4)
    for fused, window in (("off", None), ("on", 6)):
        options = {"fused": fused, "stats": ("entropy", "received", "received_max", "received_mean")}
        options["query_window"] = window
        sharded = sharded_forward(model, ids, 3, mask, **options)
        one = one_process(model, ids, mask, **options)
        assert {"key:received", "key:received_max", "key:received_mean"} <= set(one[1])
        assert_same(sharded, one, mask)


@pytest.mark.parametrize("model_type", ["llama", "mpt"])
def test_scales_and_a_schedule_see_true_positions(model_type):
    model = build(model_type, SUPPORTED[model_type][0])
    heads = SUPPORTED[model_type][0].get("num_attention_heads", 4)
    ids, _ = ids_and_mask("none", T=23)
    scales = 0.5 + torch.rand(2, heads, generator=torch.Generator().manual_seed(3))
    options = {"scales": scales, "schedule": Schedule("log", 0.7, 4), "fused": "off"}
    assert_same(sharded_forward(model, ids, 3, **options), one_process(model, ids, **options))


def test_a_window_kept_in_the_mask_alone_is_refused():
    """A layer of a model that declares a sliding window but does not pass it to its attention function
    (its mask alone carries it, and the shards never read that mask) is refused, naming the family."""
    from entropy_lens.capture.call import Session
    from entropy_lens.capture.context_parallel import sharded_attention

    model = build("mistral", SUPPORTED["mistral"][0])
    layer = model.model.layers[0].self_attn
    shards = SequenceShards(0, 1, 8)  # one rank: its exchange is the identity
    session = Session(context=ShardedSequence(shards, lambda local, lengths: [local]))
    q, k = torch.randn(1, 4, 8, 8), torch.randn(1, 2, 8, 8)
    out, _ = sharded_attention(session, layer, q, k, k, None, 0.0, {"sliding_window": 4})
    assert out.shape == (1, 8, 4, 8)
    with pytest.raises(
        EntropyLensError, match="cannot shard MistralAttention: its sliding window lives in its mask"
    ):
        sharded_attention(session, layer, q, k, k, None, 0.0, {})


@pytest.mark.parametrize("padding", ["none", "left"])
def test_sdpa_rows_in_blocks_with_grouped_keys_equal_one_process(monkeypatch, padding):
    """The sharded sdpa output (`bottom_right_sdpa`) in blocks of a few rows (MASK_BUDGET), a GQA layer's
    grouped K and V given to sdpa as they are (CPU), with and without key padding."""
    from entropy_lens.capture import context_parallel

    model = build("llama", SUPPORTED["llama"][0])  # GQA
    attention = model.model.layers[0].self_attn
    assert attention.config.num_key_value_heads < attention.config.num_attention_heads
    ids, mask = ids_and_mask(padding, T=21, pad=4)
    mask = None if padding == "none" else mask
    monkeypatch.setattr(context_parallel, "MASK_BUDGET", 40)  # 1 to 3 rows of up to 21 keys per block
    sharded = sharded_forward(model, ids, 2, mask, fused="off")
    assert_same(sharded, one_process(model, ids, mask, fused="off"), mask)
