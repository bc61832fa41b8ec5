"""Query-position scale schedules (capture/schedule.py): m(i) multiplies query row i's scores in the
layer output and the entropy, checked against float64 softmax with per-row scales, in both the
separate and the fused path, and through a scan."""

import math

import numpy as np
import pytest
import torch
from capture_cases import CPU_FUSED, StatsTo
from tiny import make_tiny_model

from entropy_lens.capture.attention import entropy_lens_attention
from entropy_lens.capture.call import Session, activate
from entropy_lens.capture.schedule import Schedule, parse_schedule
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Fused, Measure
from entropy_lens.runs.scan import ScanConfig, scan


def test_parse_and_the_two_curves():
    assert parse_schedule(None) is None
    pw, lg = parse_schedule("piecewise:1.5", 4), parse_schedule("log:0.4", 4)
    i = torch.arange(10)
    assert pw.multiplier(i).tolist() == [1.0] * 4 + [1.5] * 6
    want = [1.0] * 4 + [1 + 0.4 * math.log(j / 4) for j in range(4, 10)]
    np.testing.assert_allclose(lg.multiplier(i).numpy(), want, rtol=1e-6)
    for bad in ("log", "log:x", "cosine:2", "piecewise:0", "log:-1", "log:nan"):
        with pytest.raises(EntropyLensError, match="scale-schedule"):
            parse_schedule(bad)


def _float64_attention(q, k, v, lam, m):
    """(out (B, T, Hq, D), entropy (B, Hq, T)) of causal softmax(m(i) λ q_i·k_j) in float64."""
    G = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(G, 1) for x in (k, v))
    s = lam * m.double().view(1, 1, -1, 1) * (q.double() @ k.transpose(-1, -2))
    T = s.shape[-1]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    p = torch.softmax(s, -1)
    return (p @ v).transpose(1, 2), -torch.special.xlogy(p, p).sum(-1)


def test_the_published_schedules_are_their_sources_formulas():
    """Written here from each source, in float64: Llama 4's attn_scales = log1p(floor((p + 1)/F))·A + 1
    (transformers' Llama4TextAttention), Qwen's logn = log_L(p + 1) beyond L else 1 (modeling_qwen.py),
    YaRN's mscale² = (0.1·ln s + 1)² with s = (p + 1)/L per position; the published constants by
    default."""
    p = np.arange(0, 100000, 7, dtype=np.float64)
    L = 2048
    want = {
        "llama4": 1 + 0.1 * np.log1p(np.floor((p + 1) / 8192)),
        "llama4:0.2,16": 1 + 0.2 * np.log1p(np.floor((p + 1) / 16)),
        "qwen-logn": np.where(p + 1 > L, np.log(p + 1) / np.log(L), 1.0),
        "yarn": (0.1 * np.log(np.maximum((p + 1) / L, 1.0)) + 1) ** 2,
        "yarn:0.3": (0.3 * np.log(np.maximum((p + 1) / L, 1.0)) + 1) ** 2,
    }
    for text, m in want.items():
        got = parse_schedule(text, L).multiplier(torch.from_numpy(p))
        assert got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), m, rtol=1e-7, err_msg=text)
    assert not parse_schedule("llama4").needs_train_len and parse_schedule("yarn").needs_train_len
    for bad in ("llama4:0.1", "llama4:0.1,0", "qwen-logn:2", "yarn:-1", "yarn:a"):
        with pytest.raises(EntropyLensError, match="scale-schedule"):
            parse_schedule(bad)
    with pytest.raises(EntropyLensError, match="L >= 2"):
        parse_schedule("qwen-logn", 1)


@pytest.mark.parametrize("fused", ["off", "on"])
@pytest.mark.parametrize("text", ["piecewise:1.7", "log:0.6", "llama4:0.4,6", "qwen-logn", "yarn:0.3"])
def test_schedule_scales_output_and_entropy_by_query_position(text, fused):
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, h, 40, 16, generator=g) for h in (4, 2, 2))
    schedule = parse_schedule(text, 12)
    got = []
    session = Session(
        scales=1.3,
        schedule=schedule,
        measure=Measure(fused=Fused(fused)),
        reports=StatsTo(lambda layer, stats, offset: got.append(stats["entropy"])),
    )
    with torch.no_grad(), activate(session):
        out, _ = entropy_lens_attention(attn, q, k, v, None)
    want_out, want_ent = _float64_attention(
        q, k, v, 1.3 * attn.scaling, schedule.multiplier(torch.arange(40))
    )
    assert session.paths == {CPU_FUSED if fused == "on" else "sdpa-then-entropy"}  # CPU
    assert (got[0].double() - want_ent).abs().max().item() <= 1e-5
    assert (out.double() - want_out).abs().max().item() <= 1e-5


def test_position_ids_place_the_rows():
    """A cached decode step: the row's position comes from position_ids (or the keys' count)."""
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn
    g = torch.Generator().manual_seed(3)
    q, k, v = (
        torch.randn(1, 4, 1, 16, generator=g),
        *(torch.randn(1, 2, 30, 16, generator=g) for _ in range(2)),
    )
    sched = Schedule("piecewise", 2.0, 10)
    outs = []
    for pid in (None, torch.tensor([[29]])):
        with torch.no_grad(), activate(Session(schedule=sched)):
            outs.append(entropy_lens_attention(attn, q, k, v, None, position_ids=pid)[0])
    with torch.no_grad(), activate(Session(scales=2.0)):  # position 29 >= L: m = 2 everywhere
        want = entropy_lens_attention(attn, q, k, v, None)[0]
    assert torch.allclose(outs[0], want, atol=1e-6) and torch.allclose(outs[1], want, atol=1e-6)


@pytest.mark.slow  # eight scans
def test_scan_with_a_schedule_changes_only_positions_beyond_the_training_length(tiny_dir):
    base = {"model": str(tiny_dir), "length": 24, "samples": 2, "data": "austen:persuasion", "train_len": 8}
    plain = scan(ScanConfig(**base, fused="off"), progress=False)
    one = scan(ScanConfig(**base, fused="off", scale_schedule="piecewise:1.0"), progress=False)
    log = scan(ScanConfig(**base, fused="off", scale_schedule="log:0.8"), progress=False)
    np.testing.assert_array_equal(one.entropy, plain.entropy)  # m = 1 everywhere: the same numbers
    np.testing.assert_array_equal(log.entropy[..., :9], plain.entropy[..., :9])  # m(i) = 1 for i <= L
    assert np.abs(log.entropy[..., 9:] - plain.entropy[..., 9:]).min() > 0
    assert (
        log.meta["scan_config"]["scale_schedule"] == "log:0.8"
        and plain.meta["scan_config"]["scale_schedule"] is None
    )
    with pytest.raises(EntropyLensError, match="scale-schedule"):
        scan(ScanConfig(**base, scale_schedule="cosine:1"), progress=False)
    for text, inside in (("qwen-logn", 8), ("yarn:0.5", 8), ("llama4:0.3,12", 11)):  # m(i) = 1 for i < inside
        named = scan(ScanConfig(**base, fused="off", scale_schedule=text), progress=False)
        np.testing.assert_array_equal(named.entropy[..., :inside], plain.entropy[..., :inside])
        assert np.abs(named.entropy[..., inside:] - plain.entropy[..., inside:]).min() > 0, text
    no_l = {k: v for k, v in base.items() if k != "train_len"}  # llama4's schedule needs no L
    assert (
        scan(ScanConfig(**no_l, scale_schedule="llama4"), progress=False).entropy.shape == plain.entropy.shape
    )


@pytest.mark.parametrize("text", ["llama4:0.3,12", "qwen-logn", "yarn:0.5"])
def test_a_published_schedule_through_scan_equals_eager_with_scaled_queries(text, tiny_dir):
    """The scan's entropy and loss equal float64 entropy and the loss of the model's own eager attention
    with each query row multiplied by the source's m(i) (a hook on q_proj: RoPE is linear per position,
    so scaling before it is scaling after), the formula written here again."""
    from architectures import eager, mean_by_position

    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model

    L, T = 8, 24
    config = ScanConfig(
        model=str(tiny_dir), length=T, samples=2, data="austen:persuasion", train_len=L, scale_schedule=text
    )
    result = scan(config, progress=False)
    i = np.arange(T, dtype=np.float64)
    m = {
        "llama4:0.3,12": 1 + 0.3 * np.log1p(np.floor((i + 1) / 12)),
        "qwen-logn": np.maximum(1.0, np.log(i + 1) / np.log(L)),
        "yarn:0.5": (1 + 0.5 * np.log(np.maximum((i + 1) / L, 1.0))) ** 2,
    }[text]
    lm = load_model(str(tiny_dir), dtype="float32")
    rows = torch.from_numpy(m).float().view(1, T, 1)
    hooks = [
        layer.self_attn.q_proj.register_forward_hook(lambda mod, args, out: out * rows)
        for layer in lm.model.model.layers
    ]
    try:
        ids = torch.from_numpy(token_chunks(lm.tokenizer, config.data, length=T, samples=2).ids)
        logits, entropies = eager(lm.model, ids[:, :-1], None)
    finally:
        for hook in hooks:
            hook.remove()
    np.testing.assert_allclose(result.entropy, mean_by_position(entropies, None), atol=2e-5, rtol=0)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(0)
    np.testing.assert_allclose(result.loss, nll.numpy(), atol=1e-4, rtol=0)
