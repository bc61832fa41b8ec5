"""Wrong numbers nobody flags (issue 48): a non-finite input is refused in one line by every public entry
point and by the capture (naming the layer), never turned into a finite statistic; the recorder checks its
settings as the flags do; first_mass counts a row's first K real keys, padding skipped, on every backend
and through the recorder."""

import re

import numpy as np
import pytest
import torch
from kernel_cases import RUNNABLE, make_inputs, make_values

from entropy_lens.capture import EntropyRecorder
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import (
    BACKENDS,
    attention_entropy,
    attention_stats,
    attention_with_entropy,
    shard_state,
)
from entropy_lens.models import load_model

# the refusals come before any kernel runs: every backend's name is refused, triton's too where it cannot run
ALL_BACKENDS = ["auto", *BACKENDS]
RUNS = ["auto", "reference", *RUNNABLE]  # where the kernels run (triton: tests/kernels/test_triton_interp.py)


def _poisoned(x: torch.Tensor, value: float, at: tuple) -> torch.Tensor:
    x = x.clone()
    x[at] = value
    return x


@pytest.fixture(scope="module")
def tiny_rope():
    return load_model("tiny-rope").model


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_a_non_finite_query_or_key_is_refused_naming_where(backend, bad):
    q, k = make_inputs(2, 4, 2, 20, 20)
    with pytest.raises(
        ValueError, match=r"^q holds 1 non-finite value \(first at batch 1, head 2, position 17\); "
    ):
        attention_stats(q=_poisoned(q, bad, (1, 2, 17, 3)), k=k, softmax_scale=0.3, backend=backend)
    with pytest.raises(
        ValueError, match=r"^k holds 1 non-finite value \(first at batch 0, head 1, position 4\); "
    ):
        attention_stats(q, _poisoned(k, bad, (0, 1, 4, 0)), softmax_scale=0.3, backend=backend)
    with pytest.raises(ValueError, match=r"^q holds 1 non-finite"):
        attention_entropy(_poisoned(q, bad, (0, 0, 0, 0)), k, softmax_scale=0.3, backend=backend)


@pytest.mark.parametrize("backend", ["auto", *(b for b in BACKENDS if b != "reference")])
def test_the_one_pass_refuses_non_finite_values_too(backend):
    q, k = make_inputs(1, 2, 2, 12, 12)
    v = make_values(1, 2, 12)
    with pytest.raises(
        ValueError, match=r"^v holds 2 non-finite values \(first at batch 0, head 1, position 3\)"
    ):
        attention_with_entropy(
            q,
            k,
            _poisoned(_poisoned(v, float("nan"), (0, 1, 3, 0)), float("inf"), (0, 1, 5, 1)),
            softmax_scale=0.3,
            backend=backend,
        )


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_non_finite_scale_sink_or_slope_is_refused(backend):
    q, k = make_inputs(1, 4, 2, 10, 10)
    nan = float("nan")
    with pytest.raises(ValueError, match="softmax_scale must be a finite number; got nan"):
        attention_stats(q, k, softmax_scale=nan, backend=backend)
    with pytest.raises(ValueError, match=r"softmax_scale holds 1 non-finite value \(first at head 3\)"):
        attention_stats(q, k, softmax_scale=torch.tensor([0.3, 0.3, 0.3, float("inf")]), backend=backend)
    for name in ("sinks", "alibi_slopes"):
        with pytest.raises(ValueError, match=rf"{name} holds 1 non-finite value \(first at head 2\)"):
            attention_stats(
                q, k, softmax_scale=0.3, backend=backend, **{name: torch.tensor([0.1, 0.2, nan, 0.1])}
            )


def test_a_key_shard_refuses_non_finite_inputs():
    q, k = make_inputs(1, 2, 2, 8, 8)
    with pytest.raises(
        ValueError, match=r"^k holds 1 non-finite value \(first at batch 0, head 0, position 2\)"
    ):
        shard_state(q, _poisoned(k, float("nan"), (0, 0, 2, 0))[:, :, :4], 0.3, key_offset=0, total_keys=8)


@pytest.mark.parametrize("fused", ["on", "off"])
def test_a_model_that_produces_nan_stops_the_capture_naming_the_layer(tiny_rope, fused):
    model = tiny_rope
    weight = model.model.layers[1].self_attn.q_proj.weight
    saved = weight.detach().clone()
    ids = torch.arange(3, 40).unsqueeze(0)
    try:
        with torch.no_grad():
            weight[5, 0] = float("nan")
        refused = r"^layer 1's query holds \d+ non-finite values \(first at batch 0, head 0, position 0\); .*--dtype"
        with (
            pytest.raises(EntropyLensError, match=refused),
            torch.no_grad(),
            EntropyRecorder(model, fused=fused),
        ):
            model(ids)
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    with torch.no_grad(), EntropyRecorder(model, fused=fused) as rec:  # restored: finite throughout
        model(ids)
    assert np.isfinite(rec.entropy).all()


# -- the recorder's settings, checked as the flags check them -------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"first_keys": 0},
            r"first_keys must be at least 1 and at most 4194304 \(got 0\); pass first_keys=1",
        ),
        ({"first_keys": -3}, r"first_keys must be at least 1 and at most 4194304 \(got -3\)"),
        ({"first_keys": 2.9}, r"first_keys must be a whole number \(got 2.9\); pass first_keys=1"),
        ({"first_keys": "2"}, r"first_keys must be a whole number \(got '2'\)"),
        ({"first_keys": True}, r"first_keys must be a whole number \(got True\)"),
        (
            {"recent_keys": 0},
            r"recent_keys must be at least 1 and at most 4194304 \(got 0\); pass recent_keys=1",
        ),
        ({"recent_keys": 1.5}, r"recent_keys must be a whole number \(got 1.5\)"),
        ({"scales": 0.0}, r"scales must be above 0 \(got 0.0\)"),
        ({"scales": -1}, r"scales must be above 0 \(got -1\)"),
        ({"scales": float("nan")}, r"scales must be a finite number \(got nan\); pass scales=1.0"),
        ({"scales": float("inf")}, r"scales must be a finite number \(got inf\)"),
        ({"scales": np.array([[1.0, 1.0, 0.0, 1.0]] * 2)}, r"scales at layer 0, head 2 is 0 \(2 values"),
        (
            {"scales": torch.tensor([[1.0] * 4, [1.0, float("nan"), 1.0, 1.0]])},
            r"scales at layer 1, head 1 is nan",
        ),
        ({"stats": ("entropy", "fading")}, r"unknown statistic \['fading'\]"),
        ({"backend": "cuda"}, r"unknown entropy backend 'cuda'"),
        ({"fused": "yes"}, r"fused='yes' is not known"),
    ],
)
def test_the_recorder_refuses_settings_the_flags_refuse(tiny_rope, options, message):
    with pytest.raises(ValueError, match=message):
        EntropyRecorder(tiny_rope, **options)


def test_the_cli_refuses_the_same_scale_and_first_keys():
    from entropy_lens.runs.configs import ScanConfig

    for field, value, message in (
        ("scale", 0.0, r"--scale must be above 0 \(got 0.0\)"),
        ("first_keys", 0, r"--first-keys must be at least 1 and at most 4194304 \(got 0\)"),
        ("recent_keys", 0, r"--recent-keys must be at least 1 and at most 4194304 \(got 0\)"),
    ):
        with pytest.raises(EntropyLensError, match=message):
            ScanConfig(model="tiny-rope", length=16, **{field: value})


def test_an_unknown_recorder_keyword_raises(tiny_rope):
    with pytest.raises(TypeError, match="first_key"):
        EntropyRecorder(tiny_rope, first_key=3)


@pytest.mark.parametrize("backend", RUNS)
def test_a_zero_softmax_scale_is_uniform_attention_exactly_on_every_kernel(backend):
    """λ = 0 at the kernels: every score 0, so row i's i + 1 keys are uniform (H = ln(i + 1)); the recorder
    and --scale refuse a multiplier of 0 instead (above)."""
    q, k = make_inputs(2, 4, 2, 9, 9)
    rows = attention_stats(q, k, softmax_scale=0.0, stats=("entropy", "first_mass"), backend=backend)
    n = torch.arange(1, 10, dtype=torch.float32)
    assert torch.allclose(rows["entropy"], n.log().expand(2, 4, 9), atol=1e-6)
    assert torch.allclose(rows["first_mass"], (1 / n).expand(2, 4, 9), atol=1e-6)


# -- first_mass: a row's first K real keys, padding skipped ---------------------------------------------


def _padded(starts, S):
    """The (B, S) key-padding mask of a batch whose row b has starts[b] pad keys before its real keys
    (left padding): real keys j >= starts[b]."""
    return torch.arange(S)[None, :] >= torch.tensor(starts)[:, None]


@pytest.mark.parametrize("backend", RUNS)
@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("one_pass", [False, True], ids=["stats", "with-output"])
def test_first_mass_counts_each_rows_first_real_keys_on_every_kernel(backend, window, one_pass):
    """Left-padded rows (0, 4 and 9 pad keys) give the first_mass of the same row unpadded, on every
    kernel, from a (B, S) padding mask and from the 4-D causal + padding mask transformers builds; and
    equal the float64 reference, which counts the keys r_b <= j < r_b + K."""
    if one_pass and backend == "reference":
        pytest.skip("the reference computes no output")
    B, Hq, Hkv, S, K = 3, 4, 2, 20, 3
    starts = [0, 4, 9]
    q, k = make_inputs(B, Hq, Hkv, S, S)
    v = make_values(B, Hkv, S, 16)
    keep = _padded(starts, S)
    causal4d = keep[:, None, None, :] & torch.ones(S, S, dtype=torch.bool).tril()[None, None]

    def first_mass(q, k, v, **kw):
        kw = {"softmax_scale": 0.3, "stats": ("first_mass",), "first_keys": K, "window": window, **kw}
        if one_pass:
            return attention_with_entropy(q, k, v, backend=backend, **kw)["first_mass"]
        return attention_stats(q, k, backend=backend, **kw)["first_mass"]

    want = attention_stats(
        q,
        k,
        softmax_scale=0.3,
        stats=("first_mass",),
        first_keys=K,
        window=window,
        mask=keep,
        backend="reference",
    )["first_mass"]
    for mask in (keep, causal4d):
        got = first_mass(q, k, v, mask=mask)
        assert (got - want).abs().max().item() <= 1e-5
    for b, r in enumerate(starts):  # the same row without its padding
        alone = first_mass(q[b : b + 1, :, r:], k[b : b + 1, :, r:], v[b : b + 1, :, r:])
        assert (want[b, :, r:] - alone[0]).abs().max().item() <= 1e-5
    assert want[1:, :, :4].abs().max() == 0  # pad rows see no key
    assert (want[2, :, 9 : 9 + K] - 1).abs().max() <= 1e-6  # a row among its first K real keys: all there


@pytest.mark.parametrize("backend", RUNS)
@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("one_pass", [False, True], ids=["stats", "with-output"])
def test_recent_mass_counts_each_rows_last_keys_padding_or_not_on_every_kernel(backend, window, one_pass):
    """recent_mass (W = 3) of left-padded rows (0, 4 and 9 pad keys) equals that of the same row unpadded,
    on every kernel, from a (B, S) padding mask and from transformers' 4-D mask: the last W keys end at the
    row's own position, and pad keys hold no mass; equal the float64 reference."""
    if one_pass and backend == "reference":
        pytest.skip("the reference computes no output")
    B, Hq, Hkv, S, W = 3, 4, 2, 20, 3
    starts = [0, 4, 9]
    q, k = make_inputs(B, Hq, Hkv, S, S)
    v = make_values(B, Hkv, S, 16)
    keep = _padded(starts, S)
    causal4d = keep[:, None, None, :] & torch.ones(S, S, dtype=torch.bool).tril()[None, None]

    def recent_mass(q, k, v, backend=backend, **kw):
        kw = {"softmax_scale": 0.3, "stats": ("recent_mass",), "recent_keys": W, "window": window, **kw}
        if one_pass:
            return attention_with_entropy(q, k, v, backend=backend, **kw)["recent_mass"]
        return attention_stats(q, k, backend=backend, **kw)["recent_mass"]

    want = attention_stats(
        q,
        k,
        softmax_scale=0.3,
        stats=("recent_mass",),
        recent_keys=W,
        window=window,
        mask=keep,
        backend="reference",
    )["recent_mass"]
    for mask in (keep, causal4d):
        assert (recent_mass(q, k, v, mask=mask) - want).abs().max().item() <= 1e-5
    for b, r in enumerate(starts):  # the same row without its padding
        alone = recent_mass(q[b : b + 1, :, r:], k[b : b + 1, :, r:], v[b : b + 1, :, r:])
        assert (want[b, :, r:] - alone[0]).abs().max().item() <= 1e-5
    assert want[1:, :, :4].abs().max() == 0  # pad rows see no key
    assert (want[2, :, 9 : 9 + W] - 1).abs().max() <= 1e-6  # a row W keys in or less: all its mass
    assert want[0, :, W:].mean() < 0.95  # later rows put some mass further back


def test_key_shards_take_the_global_first_real_key():
    """shard_state: first_mass of merged shards equals the whole's under left padding, given each row's
    first real key; without it, a masked first_mass is refused (a shard's slice cannot tell)."""
    from entropy_lens.kernels import merge_states
    from entropy_lens.kernels.stats import read_stats

    B, S, K = 2, 24, 3
    q, k = make_inputs(B, 4, 2, S, S)
    keep = _padded([0, 7], S)
    whole = attention_stats(q, k, softmax_scale=0.3, stats=("first_mass",), first_keys=K, mask=keep)
    state = None
    for a, b in ((0, 5), (5, 9), (9, 24)):
        part = shard_state(
            q,
            k[:, :, a:b],
            0.3,
            key_offset=a,
            total_keys=S,
            mask=keep[:, a:b],
            stats=("first_mass",),
            first_keys=K,
            first_key=torch.tensor([0, 7]),
        )
        state = part if state is None else merge_states(state, part)
    merged = read_stats(state, None, ("first_mass",))["first_mass"]
    assert (merged - whole["first_mass"]).abs().max().item() <= 1e-5
    with pytest.raises(ValueError, match="needs first_key"):
        shard_state(
            q, k[:, :, 5:9], 0.3, key_offset=5, total_keys=S, mask=keep[:, 5:9], stats=("first_mass",)
        )


@pytest.mark.parametrize("name", ["tiny-nope", "tiny-rope", "tiny-alibi"])
@pytest.mark.parametrize("fused", ["off", "on"])
def test_the_recorder_reads_first_mass_of_padded_rows_as_unpadded(name, fused):
    """The same 54 tokens alone, after 10 left pad tokens and before 10 right pad tokens (with the
    attention mask): first_mass (K = 3) equal at every real position; 1 at positions 0-2."""
    model = load_model(name).model
    ids = torch.arange(3, 57).unsqueeze(0)
    pad = torch.zeros(1, 10, dtype=torch.long)
    runs = {
        "alone": (ids, None),
        "left": (torch.cat([pad, ids], 1), torch.cat([pad, torch.ones_like(ids)], 1)),
        "right": (torch.cat([ids, pad], 1), torch.cat([torch.ones_like(ids), pad], 1)),
    }
    got = {}
    for how, (tokens, mask) in runs.items():
        with torch.no_grad(), EntropyRecorder(model, stats=("first_mass",), first_keys=3, fused=fused) as rec:
            model(tokens, attention_mask=mask)
        got[how] = rec.mean("first_mass")[..., :54]
    assert np.allclose(got["alone"][..., :3], 1.0, atol=1e-6)
    for how in ("left", "right"):
        assert np.abs(got[how] - got["alone"]).max() <= 1e-5, how


def test_a_scan_whose_model_produces_nan_stops_in_one_line_naming_the_layer(tmp_path, capsys):
    from safetensors.torch import load_file, save_file
    from tiny import make_tiny_dir

    from entropy_lens.cli import main

    folder = make_tiny_dir(tmp_path / "nan-model")
    weights = load_file(folder / "model.safetensors")
    weights["model.layers.1.self_attn.k_proj.weight"][3, 2] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()  # the folder's writing progress
    args = ["scan", str(folder), "--len", "24", "--samples", "1", "--data", "austen:northanger", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "scan.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    # the first layer whose output is not finite, named before the scan (its loss check) or by the capture
    assert re.search(r"layer 1's (output|key) holds \d+ non-finite values \(first at batch 0, ", err), err
    assert not (tmp_path / "scan.npz").exists()
