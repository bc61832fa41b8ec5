"""Capture on tiny random Llama models vs the model's own eager attention probabilities."""

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, build
from capture_cases import CPU_FUSED, CPU_FUSED_BACKEND, MASK_KINDS, StatsTo, recorded_backends
from tiny import make_tiny_model, make_tiny_sliding_window_model
from tolerances import sum_tolerance

from entropy_lens.capture import EntropyRecorder, ScaleSession, forward_hidden, next_token_nll
from entropy_lens.capture.accumulate import HostSums
from entropy_lens.capture.attention import entropy_lens_attention
from entropy_lens.capture.call import Session, activate
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure
from entropy_lens.kernels import attention_entropy, attention_stats, native_available


def _eager_entropy(model, ids, attention_mask=None):
    """Per-layer (B, H, T) entropy from materialised eager probabilities, float64."""
    prev = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(ids, attention_mask=attention_mask, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(prev)
    return [torch.special.entr(a.double()).sum(-1) for a in att]


@pytest.mark.parametrize("n_heads,n_kv", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
def test_entropy_matches_eager_and_logits_unchanged(n_heads, n_kv):
    model = make_tiny_model(n_heads=n_heads, n_kv_heads=n_kv)
    ids = torch.randint(0, 300, (2, 40))
    with torch.no_grad():
        plain = model(ids).logits
        with EntropyRecorder(model) as rec:
            hooked = model(ids).logits
        with EntropyRecorder(model, fused="off"):
            separate = model(ids).logits
    assert torch.equal(separate, plain)  # sdpa's own output: the separate path changes nothing
    torch.testing.assert_close(hooked, plain, atol=1e-5, rtol=0)  # "auto" may fuse: rounding only
    eager = _eager_entropy(model, ids)
    assert rec.entropy.shape == (2, n_heads, 40)
    for layer, h in enumerate(eager):
        np.testing.assert_allclose(rec.entropy[layer], h.mean(0).numpy(), atol=1e-5)
        np.testing.assert_allclose(rec.entropy_sq[layer], (h**2).mean(0).numpy(), atol=1e-4)
    assert rec.count.tolist() == [2] * 40


def _record_padded(model, ids, mask):
    """The recorder after one padded forward, whose logits at real tokens must equal the plain model's."""
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).logits
        with EntropyRecorder(model) as rec:
            hooked = model(ids, attention_mask=mask).logits
    assert torch.allclose(hooked[mask.bool()], plain[mask.bool()], atol=1e-5)
    return rec


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_is_respected_and_positions_aligned(side):
    model = make_tiny_model(n_heads=4, n_kv_heads=2)
    T, pad = 30, 9
    ids = torch.randint(2, 300, (2, T))
    mask = torch.ones(2, T, dtype=torch.long)
    if side == "left":
        mask[1, :pad] = 0
    else:
        mask[1, T - pad :] = 0
    rec = _record_padded(model, ids, mask)
    valid = mask.bool()
    eager = _eager_entropy(model, ids, mask)
    # the padded row's valid tokens, placed at their true positions 0..T-pad-1
    short = ids[1][valid[1]].unsqueeze(0)
    alone = _eager_entropy(model, short)
    for layer in range(2):
        full = eager[layer][0].numpy()  # unpadded row: positions 0..T-1
        expect = full.copy()
        expect[:, : T - pad] = (full[:, : T - pad] + alone[layer][0].numpy()) / 2
        np.testing.assert_allclose(rec.entropy[layer], expect, atol=1e-5)
    assert rec.count.tolist() == [2] * (T - pad) + [1] * pad


def test_positions_no_row_reaches_are_not_reported():
    model = make_tiny_model()
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[0, :3], mask[1, :7] = 0, 0  # every row left-padded: true positions end at 16
    with torch.no_grad(), EntropyRecorder(model) as rec:
        model(torch.randint(2, 300, (2, 20)), attention_mask=mask)
    assert rec.count.tolist() == [2] * 13 + [1] * 4 and np.isfinite(rec.entropy).all()


def _spy_kernels(monkeypatch):
    """Record the capture's mask checks and the (mask shape, window) each kernel call gets."""
    from entropy_lens.capture import call, paths
    from entropy_lens.kernels import masks

    calls, seen = [], []
    monkeypatch.setattr(call, "as_key_padding", lambda *a: calls.append(1) or masks.as_key_padding(*a))
    real = paths.run  # every route's kernel call: the separate pass and the fused ones

    def spy(kernel, q, k, v, softmax_scale, mods, **kw):
        seen.append((None if mods.mask is None else tuple(mods.mask.shape), mods.window))
        return real(kernel, q, k, v, softmax_scale, mods, **kw)

    monkeypatch.setattr(paths, "run", spy)
    return calls, seen


def test_padding_mask_is_reduced_to_key_padding_once_per_forward(monkeypatch):
    calls, seen = _spy_kernels(monkeypatch)
    model = make_tiny_model(n_layers=3)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :5] = 0
    with torch.no_grad(), EntropyRecorder(model) as rec:
        model(torch.randint(2, 300, (2, 16)), attention_mask=mask)
        model(torch.randint(2, 300, (2, 16)), attention_mask=mask)
    assert len(calls) == 2  # one check per forward
    assert seen == [((2, 1, 1, 16), None)] * 6  # the kernels get key padding
    assert rec.count.tolist() == [4] * 11 + [2] * 5


def test_sliding_window_layers_match_eager_and_reach_the_kernels_as_a_window(monkeypatch):
    calls, seen = _spy_kernels(monkeypatch)
    model = make_tiny_sliding_window_model(window=6)
    ids = torch.randint(2, 300, (2, 30))
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[1, 24:] = 0  # right padding: true positions stay aligned
    rec = _record_padded(model, ids, mask)
    valid = mask.bool()
    assert len(calls) == 2  # two mask objects (full, sliding), each decomposed once
    assert seen == [((2, 1, 1, 30), None), ((2, 1, 1, 30), 6)]
    eager = _eager_entropy(model, ids, mask)
    w = valid.double()[:, None, :]  # (B, 1, T)
    for layer, h in enumerate(eager):
        expect = (h * w).sum(0) / w.sum(0)
        np.testing.assert_allclose(rec.entropy[layer], expect.numpy(), atol=1e-5)
    assert rec.entropy[1][:, 10:].max() <= np.log(6) + 1e-6 < rec.entropy[0][:, 10:].max()  # the window binds


def _scaled_q_proj_model(model, mult):
    """Independent construction: multiplying q_proj's rows of head h by m_h scales λ_h by m_h
    (RoPE is linear, so before or after it is the same)."""
    import copy

    other = copy.deepcopy(model)
    d = model.config.head_dim
    with torch.no_grad():
        for layer, attn in enumerate(l.self_attn for l in other.model.layers):
            m = torch.as_tensor(mult[layer], dtype=torch.float32).repeat_interleave(d)
            attn.q_proj.weight.mul_(m.unsqueeze(1))
    return other


@pytest.mark.parametrize("kind", ["uniform", "per_head"])
def test_scales_equal_scaled_query_projection(kind):
    model = make_tiny_model(n_heads=4, n_kv_heads=2)
    ids = torch.randint(0, 300, (1, 32))
    if kind == "uniform":
        scales, mult = 1.3, np.full((2, 4), 1.3)
    else:
        mult = np.array([[1.0, 1.5, 2.0, 0.5], [3.0, 1.2, 1.0, 0.8]])
        scales = mult
    other = _scaled_q_proj_model(model, mult)
    with torch.no_grad():
        with EntropyRecorder(model, scales=scales) as rec:
            got = model(ids).logits
        want = other(ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    for layer, h in enumerate(_eager_entropy(other, ids)):
        np.testing.assert_allclose(rec.entropy[layer], h.mean(0).numpy(), atol=1e-5)
    with torch.no_grad(), ScaleSession(model, scales=scales):
        assert torch.allclose(model(ids).logits, want, atol=1e-5)


def test_trainable_multipliers_get_gradients():
    model = make_tiny_model()
    for p in model.parameters():
        p.requires_grad_(False)
    mult = torch.full((2, 4), 1.5, requires_grad=True)
    ids = torch.randint(0, 300, (1, 16))
    with ScaleSession(model, scales=mult):
        loss = model(ids, labels=ids).loss
    loss.backward()
    assert mult.grad is not None and mult.grad.abs().sum() > 0


def test_recorder_restores_implementation_on_exception():
    model = make_tiny_model()
    before = model.config._attn_implementation
    hooks_before = len(model._forward_pre_hooks)
    with pytest.raises(RuntimeError, match="boom"), EntropyRecorder(model):
        raise RuntimeError("boom")
    assert model.config._attn_implementation == before
    assert len(model._forward_pre_hooks) == hooks_before
    # outside a session the model runs exactly as before
    ids = torch.randint(0, 300, (1, 10))
    with torch.no_grad():
        a = model(ids).logits
        model.set_attn_implementation("eager")
        b = model(ids).logits
    assert torch.allclose(a, b, atol=1e-5)


def test_accumulates_over_forwards():
    model = make_tiny_model()
    a, b = torch.randint(0, 300, (1, 12)), torch.randint(0, 300, (1, 20))
    with torch.no_grad(), EntropyRecorder(model) as rec:
        model(a)
        first = {k: x.copy() for k, x in rec.sums.items()}
        held = rec.sums
        model(a)  # same length: the device sums grow in place
        model(b)
    assert first.keys() == held.keys() and all(np.array_equal(first[k], held[k]) for k in first)  # copies
    ea, eb = _eager_entropy(model, a)[0][0].numpy(), _eager_entropy(model, b)[0][0].numpy()
    expect = eb.copy()
    expect[:, :12] = (2 * ea + eb[:, :12]) / 3
    np.testing.assert_allclose(rec.entropy[0], expect, atol=1e-5)
    assert rec.count.tolist() == [3] * 12 + [1] * 8


class _CopyInFlight:
    """Stands for a CUDA event after an asynchronous device-to-host copy: lands when told, or when
    waited on."""

    def __init__(self):
        self.landed = self.waited = False

    def query(self):
        return self.landed

    def synchronize(self):
        self.waited = self.landed = True


def test_host_sums_sum_a_layer_only_once_its_copy_to_the_host_has_landed():
    """On CUDA each layer's entropy (and the forward's padding mask) reaches the host by an asynchronous
    copy: nothing is summed during a forward, at the next forward's start the layers whose copies
    report done (oldest first, never waiting), and at read-out the rest, waiting for them. Rows are
    counted once per forward, padded rows at their true positions."""
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, :5] = False  # left padding
    first, second = ([torch.rand(2, 3, 16, generator=g) for _ in range(2)] for _ in range(2))
    copies = []

    def in_flight(t):
        copies.append(_CopyInFlight())
        return t.clone(), copies[-1]

    sums = HostSums(2, 3, to_host=in_flight)
    sums.begin_forward(mask)  # copies: the mask, then layers 0 and 1
    for layer, entropy in enumerate(first):
        sums.add(layer, {"entropy": entropy}, 0)
    assert sums.pending == 2
    copies[0].landed = copies[1].landed = True
    sums.begin_forward(None)  # sums layer 0 of the first forward; layer 1's copy holds back the rest
    assert sums.pending == 1 and not any(c.waited for c in copies)
    for layer, entropy in enumerate(second):
        sums.add(layer, {"entropy": entropy}, 0)
    assert sums.pending == 3
    read = sums.read()  # waits for every copy
    total, sq, count = read["entropy"], read["entropy_sq"], read["count"]
    assert sums.pending == 0 and all(c.landed for c in copies) and copies[2].waited
    assert count.tolist() == [4] * 11 + [3] * 5
    for layer in range(2):
        a, b = first[layer].double(), second[layer].double()
        want = b.sum(0)
        want[:, :16] += a[0]
        want[:, :11] += a[1, :, 5:]  # the padded row's tokens at their true positions
        np.testing.assert_allclose(total[layer], want.numpy(), rtol=1e-12)
        want_sq = (b * b).sum(0)
        want_sq[:, :16] += a[0] ** 2
        want_sq[:, :11] += a[1, :, 5:] ** 2
        np.testing.assert_allclose(sq[layer], want_sq.numpy(), rtol=1e-12)


def test_drain_into_moves_everything_recorded_into_the_callers_sums():
    """A scan's batch goes straight into its running sums: what earlier forwards left summed in the
    recorder and what is still pending, padded rows at their true positions; the recorder is empty after."""
    model = make_tiny_model(n_layers=2)
    a, b = torch.randint(2, 300, (2, 16)), torch.randint(2, 300, (1, 12))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[0, :4] = 0
    with torch.no_grad(), EntropyRecorder(model) as ref:
        model(a, attention_mask=mask)
        model(b)
    total, sq = torch.ones(2, 4, 20, dtype=torch.float64), torch.ones(2, 4, 20, dtype=torch.float64)
    count = torch.ones(20, dtype=torch.int64)
    with torch.no_grad(), EntropyRecorder(model) as rec:
        model(a, attention_mask=mask)
        model(b)  # its start sums the first forward into the recorder; b stays pending
        rec.drain_into({"entropy": total, "entropy_sq": sq, "count": count})
    want_total, want_sq = ref.sums["entropy"], ref.sums["entropy_sq"]
    np.testing.assert_allclose(total[..., :16].numpy(), 1 + want_total, rtol=1e-12)
    np.testing.assert_allclose(sq[..., :16].numpy(), 1 + want_sq, rtol=1e-12)
    assert count.tolist() == [4] * 12 + [2] * 4 + [1] * 4 and (total[..., 16:] == 1).all()
    assert rec.count.size == 0 and rec.sums["entropy"].shape == (2, 4, 0)
    with torch.no_grad(), EntropyRecorder(model) as rec:
        model(a)
    with pytest.raises(EntropyLensError, match="pass sums at least that long"):
        rec.drain_into({"entropy": total[..., :8], "entropy_sq": sq[..., :8], "count": count[:8]})


def test_kv_cache_steps_land_at_their_positions_and_reads_between_forwards_stay_current():
    model = make_tiny_model(n_heads=4, n_kv_heads=2)
    ids = torch.randint(0, 300, (1, 15))
    with torch.no_grad(), EntropyRecorder(model) as rec:
        cache = model(ids[:, :10], use_cache=True).past_key_values
        assert rec.count.tolist() == [1] * 10  # a read between forwards ...
        for t in range(10, 15):  # ... then decoding one token at a time against the cache
            cache = model(ids[:, t : t + 1], past_key_values=cache, use_cache=True).past_key_values
    assert rec.count.tolist() == [1] * 15
    for layer, h in enumerate(_eager_entropy(model, ids)):
        np.testing.assert_allclose(rec.entropy[layer], h[0].numpy(), atol=1e-5)


def test_next_token_nll_matches_full_logits():
    model = make_tiny_model()
    ids = torch.randint(0, 300, (2, 33))
    with torch.no_grad():
        logits = model(ids).logits
    hidden = forward_hidden(model, ids[:, :-1])
    got = next_token_nll(model, hidden, ids[:, 1:], chunk=5)
    want = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    assert got.shape == (2, 32)
    assert torch.allclose(got, want, atol=1e-5)


def test_the_loss_chunk_holds_its_logits_budget_and_the_loss_does_not_depend_on_it(monkeypatch):
    from entropy_lens.capture import loss

    for batch, vocab in ((1, 32000), (1, 49152), (4, 128256), (64, 10**7)):
        chunk = loss.loss_chunk(batch, vocab)
        assert chunk >= 1
        assert chunk == 1 or 4 * batch * chunk * vocab <= loss.LOGITS_BUDGET < 4 * batch * (chunk + 1) * vocab
    model = make_tiny_model()
    ids = torch.randint(0, 300, (2, 33), generator=torch.Generator().manual_seed(0))
    hidden = forward_hidden(model, ids[:, :-1])
    whole = next_token_nll(model, hidden, ids[:, 1:], chunk=32)
    vocab = model.get_output_embeddings().out_features
    monkeypatch.setattr(loss, "LOGITS_BUDGET", 4 * 2 * 3 * vocab)  # three positions of logits per chunk
    assert loss.loss_chunk(2, vocab) == 3
    seen = []
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda m, a, out: seen.append(out.shape[1]))
    try:
        chunked = next_token_nll(model, hidden, ids[:, 1:])  # the default: loss_chunk's positions
    finally:
        handle.remove()
    assert seen == [3] * 10 + [2]
    # logits of other shapes (float32 GEMMs over the hidden size, a log-sum-exp over the vocabulary)
    tol = sum_tolerance(model.config.hidden_size + vocab)
    torch.testing.assert_close(chunked, whole, rtol=tol, atol=tol)


class _LogitsAreHidden(torch.nn.Module):
    """A head that hands the hidden states through as logits, so a test can choose them."""

    config = type("Config", (), {"get_text_config": lambda self: self})()

    def get_output_embeddings(self):
        return torch.nn.Identity()


def test_next_token_nll_is_logsumexp_minus_the_target_logit_on_extreme_rows():
    logits = torch.randn(2, 5, 300, generator=torch.Generator().manual_seed(0)) * 30
    logits[0, 1] *= 1e6  # scores far from 0
    logits[0, 2, :150] = float("-inf")  # masked-out entries
    logits[1, 3, 7] = float("inf")
    targets = torch.randint(0, 300, (2, 5), generator=torch.Generator().manual_seed(1))
    targets[0, 2], targets[1, 4] = 200, -100  # a reachable target; an ignored one
    got = next_token_nll(_LogitsAreHidden(), logits.clone(), targets, chunk=2)
    want = torch.logsumexp(logits, -1) - logits.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    want[1, 4] = float("nan")
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-6, atol=1e-5)


def test_fused_choice_is_measured_once_per_shape_on_real_work():
    from entropy_lens.capture.fused import PathChoices, wall_seconds

    calls = []
    run = {"separate": lambda: calls.append("separate") or "S", "fused": lambda: calls.append("fused") or "F"}
    cost = {"fused": 2.0, "separate": 1.0}

    def timer(fn):
        result = fn()
        return result, cost[calls[-1]]

    choices = PathChoices(timer=timer)
    got = [choices.choose("auto", ("a",), run) for _ in range(4)]
    # one warm-up each, then one timing each, every call doing a layer's real work
    assert got == [("separate", "S"), ("fused", "F"), ("separate", "S"), ("fused", "F")]
    cost.update(fused=0.5)  # a later change of speed does not matter: the shape's choice is kept
    assert choices.choose("auto", ("a",), run) == ("separate", "S") and len(calls) == 5
    for _ in range(4):
        choices.choose("auto", ("b",), run)
    assert choices.choose("auto", ("b",), run) == ("fused", "F")
    assert choices.chosen == {"a": "separate", "b": "fused"}
    assert choices.choose("on", ("a",), run)[0] == "fused"
    assert choices.choose("off", ("b",), run)[0] == "separate"
    result, seconds = wall_seconds(lambda: 7)
    assert result == 7 and seconds >= 0
    # runs=1 (CPU, nothing compiles on its first call): one timed run each, no warm-ups
    calls.clear()
    cost.update(fused=0.5)
    got = [choices.choose("auto", ("c",), run, runs=1) for _ in range(3)]
    assert got == [("separate", "S"), ("fused", "F"), ("fused", "F")] and choices.chosen["c"] == "fused"


def test_auto_runs_each_path_once_on_cpu_and_twice_where_the_fold_compiles(monkeypatch):
    """On CPU sdpa, the native kernel and the eager fold are ready code: "auto" times one real layer of
    each way; with ENTROPY_LENS_COMPILE=1 the first run compiles, and below ONE_RUN_MIN_SCORES one run's
    time is mostly noise, so each way then gets a warm-up first."""
    from entropy_lens.capture import paths
    from entropy_lens.capture.fused import PathChoices, wall_seconds

    model, ids = make_tiny_model(n_layers=5), torch.randint(0, 64, (1, 24))
    for compile_env, min_scores, trials in (("0", 24 * 24, 2), ("1", 24 * 24, 4), ("0", 24 * 24 + 1, 4)):
        monkeypatch.setenv("ENTROPY_LENS_COMPILE", compile_env)
        monkeypatch.setattr(paths, "ONE_RUN_MIN_SCORES", min_scores)  # tiny work is timed twice
        timed = []
        choices = PathChoices(timer=lambda fn, timed=timed: timed.append(fn) or wall_seconds(fn))
        with EntropyRecorder(model, choices=choices) as rec, torch.no_grad():
            model(ids)
        assert len(timed) == trials and len(choices.chosen) == 1 and not choices.trials
        assert rec.session.paths == {"sdpa-then-entropy", CPU_FUSED}


def test_fused_choices_continue_from_their_record_and_replay_a_recorded_run():
    import json

    from entropy_lens.capture.fused import PathChoices

    run = {"separate": lambda: "S", "fused": lambda: "F"}
    times = iter([1.0, 3.0, 1.0, 3.0, 9.0, 1.0, 9.0, 1.0])
    first = PathChoices(timer=lambda fn: (fn(), next(times)))
    first.choose("auto", "a", run)  # one trial of "a", then the process is interrupted
    record = json.loads(json.dumps(first.to_record()))  # as a checkpoint stores it
    resumed = PathChoices.from_record(record, timer=first.timer)
    assert [resumed.choose("auto", "a", run)[0] for _ in range(4)] == [
        "fused",
        "separate",
        "fused",
        "separate",
    ]
    assert resumed.chosen == {"a": "separate"}  # the trial before the interruption counted
    assert PathChoices.from_record(resumed.to_record()).choose("auto", "a", run) == ("separate", "S")
    # a replay takes the recorded choice after the same trials, whatever this process measures
    replay = PathChoices(
        timer=lambda fn: (fn(), 1.0 if fn is run["fused"] else 5.0), replay={"a": "separate"}
    )
    assert [replay.choose("auto", "a", run)[0] for _ in range(5)] == ["separate", "fused"] * 2 + ["separate"]


def test_unknown_fused_mode_is_refused():
    with pytest.raises(EntropyLensError, match="auto, on, off"):
        EntropyRecorder(make_tiny_model(), fused="yes")


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
def test_cpu_fused_pass_gives_the_separate_output_and_entropy(padded, native, monkeypatch):
    """On CPU the fused pass is the native kernel or, where it cannot build (here: turned off), the
    streamed torch path: its output replaces sdpa's, so the logits
    must be sdpa's and the entropy the separate pass's (GQA, padding; masks at kernel level in
    test_kernels_extras, every architecture in test_architectures)."""
    if not native:
        monkeypatch.setenv("ENTROPY_LENS_NATIVE", "0")
    fused_path = "native" if native and native_available() else "torch-streamed"
    model = make_tiny_model(n_heads=4, n_kv_heads=2)
    ids = torch.randint(0, 300, (2, 40))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :7] = 0
    runs = {}
    for fused in ("on", "off"):
        with torch.no_grad(), EntropyRecorder(model, fused=fused) as rec:
            runs[fused] = (model(ids, attention_mask=mask).logits, rec)
    assert runs["on"][1].session.paths == {fused_path}
    assert runs["off"][1].session.paths == {"sdpa-then-entropy"}
    assert runs["on"][1].session.backends == {"native" if fused_path == "native" else "torch_chunked"}
    real = mask.bool()
    torch.testing.assert_close(runs["on"][0][real], runs["off"][0][real], atol=1e-5, rtol=0)
    np.testing.assert_allclose(runs["on"][1].entropy, runs["off"][1].entropy, atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", ["torch_chunked", "native"])
def test_the_backend_named_is_the_kernel_of_every_route(backend):
    """`--backend torch_chunked --fused on` runs torch_chunked's one pass, not the native kernel, and
    `--backend native` runs the native kernel for the separate pass and the fused one alike: the plan
    (kernels.plan) names one kernel per route, and the session records it."""
    if backend == "native" and not native_available():
        pytest.skip("the native kernel does not build here")
    model, ids = make_tiny_model(n_heads=4, n_kv_heads=2), torch.randint(0, 300, (1, 24))
    seen = {}
    for fused in ("on", "off"):
        with torch.no_grad(), EntropyRecorder(model, backend=backend, fused=fused) as rec:
            model(ids)
        seen[fused] = (rec.session.paths, rec.session.backends)
    one_pass = "torch-streamed" if backend == "torch_chunked" else "native"
    assert seen == {"on": ({one_pass}, {backend}), "off": ({"sdpa-then-entropy"}, {backend})}


def test_the_recorded_path_names_what_ran():
    """A session records the path each layer took by the name of what ran: sdpa alone where nothing is
    captured, sdpa then the entropy pass, or the CPU's fused pass, which is the streamed torch path."""
    from entropy_lens.capture.paths import PATH_NAMES

    model = make_tiny_model(n_heads=4, n_kv_heads=2)
    ids = torch.randint(0, 300, (1, 12))
    seen = {}
    for name, kind, kw in [
        ("scales only", ScaleSession, {"scales": 1.2}),
        ("trainable", ScaleSession, {"scales": torch.full((2, 4), 1.2, requires_grad=True)}),
        ("off", EntropyRecorder, {"fused": "off"}),
        ("on", EntropyRecorder, {"fused": "on"}),
    ]:
        with torch.set_grad_enabled(name == "trainable"), kind(model, **kw) as capture:
            model(ids)
        seen[name] = (capture.session.paths, capture.session.backends)
    assert seen == {
        "scales only": ({"sdpa"}, set()),
        "trainable": ({"sdpa"}, set()),
        "off": ({"sdpa-then-entropy"}, {"torch_chunked"}),
        "on": ({CPU_FUSED}, {CPU_FUSED_BACKEND}),
    }
    assert set().union(*(paths for paths, _ in seen.values())) <= set(PATH_NAMES)


def test_a_layer_run_is_a_record_of_named_fields(monkeypatch):
    """A layer's route gives a `LayerRun` read by name (route, out (B, T, Hq, D), weights, rows), not
    `((out, None), rows)`, and builds it from keywords only (issue 49)."""
    from entropy_lens.capture import attention, paths

    ran = []
    monkeypatch.setattr(
        attention, "run_path", lambda call, inputs: ran.append(paths.run_path(call, inputs)) or ran[-1]
    )
    model = make_tiny_model(n_heads=4, n_kv_heads=2)
    ids = torch.randint(0, 300, (1, 12))
    for fused in ("off", "on"):
        with torch.no_grad(), EntropyRecorder(model, fused=fused):
            model(ids)
    assert {run.route.path for run in ran} == {"sdpa-then-entropy", CPU_FUSED}
    for run in ran:
        assert isinstance(run, paths.LayerRun) and run.weights is None
        assert run.out.shape[:3] == (1, 12, 4) and run.rows["entropy"].shape == (1, 4, 12)
        assert run.returned[0] is run.out and run.returned[1] is None
    with pytest.raises(TypeError):
        paths.LayerRun(ran[0].route, ran[0].out, None, ran[0].rows)


def test_mask_free_prefill_into_longer_cache_is_aligned_as_sdpa_aligns_it():
    """No mask, T > 1 and S > T (prefill into an empty static cache): sdpa keeps the first T keys,
    top-left causal; the recorded entropy must describe that same attention."""
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 4, 5, 16, generator=g),
        torch.randn(1, 2, 9, 16, generator=g),
        torch.randn(1, 2, 9, 16),
    )
    got = []
    with activate(
        Session(reports=StatsTo(lambda layer, stats, offset: got.append((stats["entropy"], offset))))
    ):
        out, _ = entropy_lens_attention(attn, q, k, v, None)
    ent, offset = got[0]
    expect = attention_entropy(q, k[:, :, :5], softmax_scale=attn.scaling, backend="reference")
    assert offset == 0 and torch.allclose(ent, expect, atol=1e-5)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k[:, :, :5], v[:, :, :5], is_causal=True, scale=attn.scaling, enable_gqa=True
    )
    assert torch.allclose(out, sdpa.transpose(1, 2), atol=1e-6)


def test_a_pre_allocated_cache_is_read_as_its_written_slots():
    """A StaticCache's layer holds 9 slots, 4 written before this forward of 2 queries (cache_seen = 4):
    the capture reads slots 0..5, so query i is key 4 + i as in a cache that grows; the distances and the
    output are those of the written keys (the unwritten slots masked, as transformers' 4-D mask does)."""
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn
    g = torch.Generator().manual_seed(3)
    q, k, v = (
        torch.randn(1, 4, 2, 16, generator=g),
        torch.randn(1, 2, 9, 16, generator=g),
        torch.randn(1, 2, 9, 16),
    )
    mask = (torch.arange(9) <= torch.arange(4, 6)[:, None]).view(1, 1, 2, 9)  # causal over the 6 written
    got = []
    measure = Measure.parse(stats=("entropy", "distance"))
    session = Session(
        reports=StatsTo(lambda layer, stats, offset: got.append((stats, offset))), measure=measure
    )
    session.cache_seen = 4
    with activate(session):
        out, _ = entropy_lens_attention(attn, q, k, v, mask)
    stats, offset = got[0]
    assert offset == 4
    for name in ("entropy", "distance"):
        expect = attention_stats(
            q, k[:, :, :6], softmax_scale=attn.scaling, stats=(name,), backend="reference"
        )
        assert torch.allclose(stats[name], expect[name], atol=1e-5), name
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=True
    )
    assert torch.allclose(out, sdpa.transpose(1, 2), atol=1e-6)


def test_a_general_mask_decides_alone_as_in_sdpa():
    """A 4-D mask that is not causal + padding (here random per query) is all sdpa applies: the
    entropy must describe the same attention, with no causal mask added on top."""
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, h, 7, 16, generator=g) for h in (4, 2, 2))
    mask = torch.rand(1, 1, 7, 7, generator=g) > 0.3
    mask[..., 0] = True  # every row sees a key
    got = []
    with activate(Session(reports=StatsTo(lambda layer, stats, offset: got.append(stats["entropy"])))):
        out, _ = entropy_lens_attention(attn, q, k, v, mask)
    expect = attention_entropy(q, k, softmax_scale=attn.scaling, causal=False, mask=mask, backend="reference")
    assert torch.allclose(got[0], expect, atol=1e-5)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=True
    )
    assert torch.allclose(out, sdpa.transpose(1, 2), atol=1e-6)


def test_the_backend_recorded_is_the_one_that_ran():
    """torch_chunked serves every mask (backend="triton" under the interpreter: triton_interp_cases.py)."""
    assert recorded_backends("torch_chunked") == {kind: {"torch_chunked"} for kind in MASK_KINDS}
    assert recorded_backends("reference") == {kind: {"reference"} for kind in MASK_KINDS}


@pytest.mark.parametrize("model_type", ["gemma2", "gpt_oss"])
def test_trainable_scales_through_eager_attention_stay_causal_without_padding(model_type):
    """A trainable per-head scale on softcap or sinks runs the model's eager attention; without padding
    transformers' sdpa mask is None (sdpa's is_causal does it), and eager then saw every key: its logits
    were off by 4-10. They equal the no-grad streamed path's at the same scale."""
    model = build(model_type, SUPPORTED[model_type][0])
    ids = torch.randint(2, 90, (2, 12), generator=torch.Generator().manual_seed(0))
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    trainable = torch.full((layers, heads), 1.3, requires_grad=True)
    with ScaleSession(model, scales=trainable) as session:
        logits = model(ids).logits
    with torch.no_grad(), ScaleSession(model, scales=1.3):
        want = model(ids).logits
    assert session.session.paths == {"eager"}
    torch.testing.assert_close(logits.detach(), want, rtol=1e-4, atol=1e-4)
