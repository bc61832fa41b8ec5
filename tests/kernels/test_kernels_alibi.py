"""ALiBi (BLOOM, MPT, Falcon; flash-attn's `alibi_slopes`) and a bias per key (Falcon) in every kernel
that can run here (kernel_cases.RUNNABLE): the float64 reference against a materialisation from the
definition (kernel_cases.definition), the entropy pass and the one pass of each kernel against it (with
softcap, sinks, GQA/MQA, masks, windows, T < S and T > S), the models' own slope·position forms, shard
merging, zero slopes, the contract's errors. The Triton kernel's launcher cases live in
triton_interp_cases.py.

The definition (bottom-right alignment: query i sits at position i + S − T among the S keys):
    s_ij = softcap(λ_h q_i·k_j) − slope_h·|i + S − T − j|, then masking, then the softmax (sinks unbiased).
"""

import functools
import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import (
    ALIBI_EXTRAS,
    ENTRY_POINTS,
    RUNNABLE,
    TILES,
    TRITON_RUNS,
    definition,
    entropy_pass,
    make_inputs,
    make_sinks,
    make_slopes,
    make_values,
    mask_kinds,
    one_pass,
    value_dim,
)

from entropy_lens.kernels import (
    ScoreMods,
    attention_entropy,
    attention_with_entropy,
    entropy_from_state,
    merge_states,
    shard_state,
    sink_mass_from_state,
    sink_state,
    statistics_kernel,
)

WINDOWS = {"causal": (True, None), "full": (False, None), "win": (True, 4), "win5": (True, 5)}
KEY_BIAS = {"slopes": None, "bias-per-seq": 2, "bias-shared": 1}  # key_bias's batch size, or none
HEADS = [(4, 4), (6, 2), (4, 1), (4, 2), (6, 1)]  # MHA, GQA 3 and 2, MQA 4 and 6 (Hq, Hkv)
LENGTHS = [(33, 33), (19, 45), (12, 5)]  # square, T < S (a cache), T > S
# (extras, (Hq, Hkv), (T, S), mask kind, causal/window, key bias): every (T/S, mask, window) triple, the
# three factors that meet in the kernels' masking, once, with the other three set so that every pair of
# values of any two factors meets in some case (a covering array of strength 2: 36 cases where the full
# product was 1,116, which the Triton interpreter took 343 s to run)
CASES = [
    (
        list(ALIBI_EXTRAS)[(t + m + w) % 4],
        HEADS[(t + 2 * m + 3 * w) % 5],
        LENGTHS[t],
        mask,
        windows,
        list(KEY_BIAS)[(m + w) % 3],
    )
    for (t, _), (m, mask), (w, windows) in itertools.product(
        enumerate(LENGTHS), enumerate(["none", "key_padding", "4d_per_head"]), enumerate(WINDOWS)
    )
]
TS_IDS = {(33, 33): "square", (19, 45): "T<S", (12, 5): "T>S"}
CASE_IDS = [f"{e}-{hq}/{hkv}-{TS_IDS[ts]}-{m}-{w}-{b}" for e, (hq, hkv), ts, m, w, b in CASES]


def test_the_grid_meets_every_pair_of_values():
    """The reduced grid still puts every value of each factor beside every value of each other factor,
    and every (T/S, mask, window) triple, so a kernel path that needs two settings at once is run."""
    values = [{case[i] for case in CASES} for i in range(6)]
    assert [len(v) for v in values] == [len(ALIBI_EXTRAS), len(HEADS), len(LENGTHS), 3, len(WINDOWS), 3]
    for i, j in itertools.combinations(range(6), 2):
        assert len({(case[i], case[j]) for case in CASES}) == len(values[i]) * len(values[j]), (i, j)
    assert len({case[2:5] for case in CASES}) == len(CASES) == 3 * 3 * len(WINDOWS)


def _kwargs(extras, Hq, T, S, mask_kind, windows, key_bias="slopes"):
    softcap, with_sinks = ALIBI_EXTRAS[extras]
    causal, window = WINDOWS[windows]
    kw = {
        "softmax_scale": torch.linspace(0.1, 0.6, Hq),  # per-head scales
        "causal": causal,
        "mask": mask_kinds(2, Hq, T, S)[mask_kind],
        "window": window,
        "softcap": softcap,
        "sinks": make_sinks(Hq) if with_sinks else None,
        "alibi_slopes": make_slopes(Hq, factor=4.0),  # steep enough to bite at these lengths
    }
    if KEY_BIAS[key_bias] is not None:  # Falcon's ALiBi as its builder rounds it, beside the slopes
        g = torch.Generator().manual_seed(5)
        kw["key_bias"] = 3.0 * torch.randn(KEY_BIAS[key_bias], Hq, S, generator=g)
    return kw


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_reference_is_the_definition(case):
    extras, (Hq, Hkv), (T, S), mask_kind, windows, key_bias = case
    q, k = make_inputs(2, Hq, Hkv, T, S)
    kw = _kwargs(extras, Hq, T, S, mask_kind, windows, key_bias)
    want_h, want_p, _ = definition(q, k, None, **kw)
    h, p = attention_entropy(q, k, backend="reference", return_sink_mass=True, **kw)
    assert (h.double() - want_h).abs().max().item() <= 1e-6
    assert (p.double() - want_p).abs().max().item() <= 1e-6
    bias = "alibi_slopes" if key_bias == "slopes" else "key_bias"
    without = attention_entropy(q, k, backend="reference", **{**kw, bias: None})
    assert (without - h).abs().max().item() > 1e-2  # the bias changes the entropy here


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_alibi_and_key_bias_match_the_definition(backend, case):
    """ALiBi (per query head under GQA/MQA), with the softcap and sinks, and a bias per key (B|1, Hq, S)
    beside it: the entropy pass and the one pass against the float64 definition, at every tile."""
    extras, (Hq, Hkv), (T, S), mask_kind, windows, key_bias = case
    q, k = make_inputs(2, Hq, Hkv, T, S)
    v = make_values(2, Hkv, S, Dv=value_dim(backend))
    kw = _kwargs(extras, Hq, T, S, mask_kind, windows, key_bias)
    want_h, want_p, want_out = definition(q, k, v, **kw)
    for tile in TILES[backend]:
        h, p = entropy_pass(backend, q, k, tile, **kw)
        assert h.dtype == p.dtype == torch.float32 and h.shape == p.shape == (2, Hq, T)
        assert (h.double() - want_h).abs().max().item() <= 1e-5
        assert (p.double() - want_p).abs().max().item() <= 1e-6
        out, h, p = one_pass(backend, q, k, v, tile, **kw)
        assert out.shape == (2, T, Hq, v.shape[-1]) and out.dtype == torch.float32
        assert (out.double() - want_out).abs().max().item() <= 1e-5
        assert (h.double() - want_h).abs().max().item() <= 1e-5
        assert (p.double() - want_p).abs().max().item() <= 1e-6


def test_a_key_bias_linear_in_the_position_is_alibi_and_the_contract_checks_it():
    """slope_h·j per key gives the softmax of −slope_h·(i − j): the same entropy as `alibi_slopes`.
    A wrong shape or a non-finite value is a ValueError; triton is not named for a key bias."""
    q, k = make_inputs(2, 4, 2, 20, 20)
    slopes = make_slopes(4, factor=4.0)
    linear = slopes.view(1, 4, 1) * torch.arange(20, dtype=torch.float32)
    for backend in ("reference", "torch_chunked"):
        by_slopes = attention_entropy(q, k, softmax_scale=0.3, alibi_slopes=slopes, backend=backend)
        by_keys = attention_entropy(q, k, softmax_scale=0.3, key_bias=linear, backend=backend)
        assert (by_slopes - by_keys).abs().max().item() <= 2e-5
    with pytest.raises(ValueError, match=r"key_bias must have shape \(2\|1, 4, 20\)"):
        attention_entropy(q, k, softmax_scale=0.3, key_bias=linear[..., :19])
    with pytest.raises(
        ValueError, match=r"key_bias holds \d+ non-finite values \(first at batch 0, head \d, key \d+\)"
    ):
        attention_entropy(q, k, softmax_scale=0.3, key_bias=linear.masked_fill(linear > 5, float("-inf")))
    assert statistics_kernel("auto", q, k, ScoreMods.build(q, k, key_bias=linear))[0] == "torch_chunked"


@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("T,S", [(30, 30), (6, 30)], ids=["prefill", "cache"])
def test_the_models_own_forms_give_the_same_softmax(padding, T, S):
    """BLOOM and Falcon add slope·pos_j (pos = the position ids, cumsum of the attention mask − 1), MPT
    slope·(j − (S − 1)): each differs from −slope·(i + S − T − j) by a constant per row, over the keys a
    causal row sees, so the entropy and the output are the same, padded or not."""
    Hq, Hkv = 4, 2
    q, k = make_inputs(2, Hq, Hkv, T, S, seed=4)
    v = make_values(2, Hkv, S)
    keep = torch.ones(2, S, dtype=torch.bool)
    if padding == "left":
        keep[1, :9] = False
    elif padding == "right":
        keep[1, -4:] = False
    slopes, scale = make_slopes(Hq, factor=2.0), torch.linspace(0.2, 0.5, Hq)
    positions = (keep.long().cumsum(-1) - 1).clamp_min(0).double()  # BLOOM's build_alibi_tensor
    forms = {
        "bloom": slopes.double().view(1, Hq, 1, 1) * positions[:, None, None, :],
        "mpt": slopes.double().view(1, Hq, 1, 1) * (torch.arange(S) - (S - 1)).double(),
    }
    G = Hq // Hkv
    scores = torch.matmul(q.double(), k.double().repeat_interleave(G, 1).transpose(-1, -2))
    scores = scores * scale.double().view(1, Hq, 1, 1)
    visible = torch.ones(T, S, dtype=torch.bool).tril(S - T) & keep[:, None, None, :]
    seen = visible.any(-1).expand(2, Hq, T)  # rows of real queries that see a key
    out, h, _ = one_pass(
        "torch_chunked", q, k, v, (8, 7), softmax_scale=scale, mask=keep, alibi_slopes=slopes
    )
    for name, bias in forms.items():
        p = torch.softmax((scores + bias).masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0)
        model_h = -torch.special.xlogy(p, p).sum(-1)
        model_out = torch.matmul(p, v.double().repeat_interleave(G, 1)).transpose(1, 2)
        assert (h.double() - model_h)[seen].abs().max().item() <= 1e-5, name
        assert (out.double() - model_out).abs().max().item() <= 1e-5, name


@pytest.mark.parametrize("cuts", [[20], [0, 7, 30, 30], [1, 2, 3, 40, 50]])  # incl. empty shards
@pytest.mark.parametrize(
    "causal,window", [(True, None), (False, None), (True, 9)], ids=["causal", "full", "win"]
)
def test_shards_merge_to_the_unsharded_alibi_entropy(cuts, causal, window):
    """Each shard's bias uses global key indices (key_offset + j), so the merge is the whole."""
    q, k = make_inputs(2, 6, 2, 37, 53, D=8)
    scale, sinks, slopes = torch.linspace(0.3, 1.5, 6), make_sinks(6), make_slopes(6, factor=2.0)
    S = k.shape[2]
    kw = {"causal": causal, "window": window, "softcap": 2.0, "alibi_slopes": slopes}
    states = [
        shard_state(q, k[:, :, a:b], scale, key_offset=a, total_keys=S, block_q=8, block_k=5, **kw)
        for a, b in itertools.pairwise([0, *cuts, S])
    ]
    plain = functools.reduce(merge_states, states)
    whole = attention_entropy(q, k, softmax_scale=scale, backend="torch_chunked", **kw)
    torch.testing.assert_close(entropy_from_state(plain), whole, atol=2e-5, rtol=0)
    torch.testing.assert_close(
        entropy_from_state(plain),
        attention_entropy(q, k, softmax_scale=scale, backend="reference", **kw),
        atol=2e-5,
        rtol=0,
    )
    states.insert(len(states) // 2, sink_state(sinks, 2, 37))  # the sink, unbiased, merged once
    state = functools.reduce(merge_states, states)
    ref_h, ref_p = attention_entropy(
        q, k, softmax_scale=scale, sinks=sinks, return_sink_mass=True, backend="reference", **kw
    )
    torch.testing.assert_close(entropy_from_state(state), ref_h, atol=2e-5, rtol=0)
    torch.testing.assert_close(sink_mass_from_state(state, sinks), ref_p, atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal,window", [(True, None), (False, None), (True, 5)])
def test_zero_slopes_change_nothing_on_every_cpu_backend(causal, window):
    """alibi_slopes of zeros runs the bias code and gives the numbers of alibi_slopes=None."""
    q, k = make_inputs(2, 6, 2, 21, 30)
    v = make_values(2, 2, 30)
    zeros = torch.zeros(6)
    kw = {
        "softmax_scale": torch.linspace(0.2, 0.7, 6),
        "causal": causal,
        "window": window,
        "softcap": 3.0,
        "sinks": make_sinks(6),
        "mask": mask_kinds(2, 6, 21, 30)["key_padding"],
    }
    for backend in ("reference", "torch_chunked"):
        a = attention_entropy(q, k, backend=backend, return_sink_mass=True, block_q=8, block_k=7, **kw)
        b = attention_entropy(
            q, k, backend=backend, return_sink_mass=True, block_q=8, block_k=7, alibi_slopes=zeros, **kw
        )
        for x, y in zip(a, b):
            assert (x - y).abs().max().item() <= 1e-6
    a = one_pass("torch_chunked", q, k, v, (8, 7), **kw)
    b = one_pass("torch_chunked", q, k, v, (8, 7), alibi_slopes=zeros, **kw)
    for x, y in zip(a, b):
        assert (x - y).abs().max().item() <= 1e-6
    shard = {key: kw[key] for key in ("causal", "window", "softcap")}
    a = shard_state(q, k[:, :, 10:], kw["softmax_scale"], key_offset=10, total_keys=30, **shard)
    b = shard_state(
        q, k[:, :, 10:], kw["softmax_scale"], key_offset=10, total_keys=30, alibi_slopes=zeros, **shard
    )
    for key in ("m", "l", "u"):
        x, y = a[key], b[key]
        assert torch.equal(x.isinf(), y.isinf()) and (x - y).nan_to_num(0.0).abs().max().item() <= 1e-6


def test_bf16_inputs_get_an_fp32_bias():
    """Low-precision q and k: the bias is added to fp32 scores, so the error against the float64 of the
    same inputs is fp32's, not bf16's (a bf16 bias of 20 is off by up to 0.06)."""
    q, k = make_inputs(2, 4, 2, 96, 96, D=32, dtype=torch.bfloat16)
    v = make_values(2, 2, 96, Dv=32, dtype=torch.bfloat16)
    kw = {"softmax_scale": 32**-0.5, "alibi_slopes": make_slopes(4).to(torch.bfloat16)}
    ref = attention_entropy(q, k, backend="reference", **kw)
    got = attention_entropy(q, k, backend="torch_chunked", block_q=32, block_k=16, **kw)
    assert (got - ref).abs().max().item() <= 1e-5
    out, h, _ = one_pass("torch_chunked", q, k, v, (32, 16), **kw)
    assert out.dtype == torch.bfloat16 and (h - ref).abs().max().item() <= 1e-5
    _, _, want = definition(q, k, v, **kw)
    assert ((out.double() - want).abs() <= want.abs() * 2**-8 + 1e-5).all()  # bf16's rounding of the output


def test_a_steep_slope_leaves_only_the_nearest_key():
    """slope → ∞: a row attends to the key at its own position alone (H = 0, output = that key's
    value), causal or not: distance 0 is one key, every other key lies at least 1 away."""
    q, k = make_inputs(1, 2, 1, 10, 14)
    v = make_values(1, 1, 14)
    slopes = torch.full((2,), 1e3)
    for causal in (True, False):
        out, h, _ = one_pass(
            "torch_chunked", q, k, v, (3, 512), softmax_scale=0.3, causal=causal, alibi_slopes=slopes
        )
        assert h.abs().max().item() < 1e-6
        assert torch.allclose(out[0, :, 0], v[0, 0, 4:], atol=1e-6)  # query i sits at key i + 4


shapes = st.tuples(
    st.integers(1, 2),  # B
    st.sampled_from([(2, 2), (4, 2), (3, 1)]),  # Hq, Hkv
    st.integers(1, 20),  # T
    st.integers(0, 8),  # extra keys: S = T + extra
    st.integers(1, 9),  # block size
    st.integers(0, 2**16),  # seed
)


@settings(max_examples=30, deadline=None)
@given(shapes, st.floats(0.05, 3.0), st.floats(0.0, 4.0), st.booleans())
def test_bounds_and_the_reference_with_any_slope(shape, scale, slope, causal):
    """0 <= H <= ln(keys seen), and torch_chunked equals the reference for any slope and tile."""
    B, (Hq, Hkv), T, extra, blk, seed = shape
    q, k = make_inputs(B, Hq, Hkv, T, T + extra, D=8, seed=seed)
    kw = {"softmax_scale": scale, "causal": causal, "alibi_slopes": torch.linspace(0, slope, Hq)}
    h = attention_entropy(q, k, block_q=blk, block_k=blk, **kw)
    n_keys = torch.arange(T, dtype=torch.float64) + extra + 1 if causal else torch.full((T,), T + extra)
    assert (h >= 0).all() and (h.double() <= torch.log(n_keys.double()) + 1e-5).all()
    assert (h - attention_entropy(q, k, backend="reference", **kw)).abs().max().item() <= 1e-5


# ---- the contract --------------------------------------------------------------------------------


# the entry points that take the score modifiers (the reference makes no output: attention_with_entropy
# on it raises, see test_kernels); triton's only where it runs (kernel_cases.RUNNABLE)
TAKE_MODIFIERS = [
    entry
    for entry in ENTRY_POINTS
    if (entry.startswith("attention") or entry in ("shard_state", "ScoreMods.build"))
    and (TRITON_RUNS or not entry.endswith("-triton"))
]
TAKE_MODIFIERS.remove("attention_with_entropy-reference")


@pytest.mark.parametrize("entry", TAKE_MODIFIERS)
def test_every_entry_point_takes_alibi_slopes(entry):
    call, cannot_run = ENTRY_POINTS[entry]
    if cannot_run is not None:
        pytest.skip(cannot_run)
    q, k = make_inputs(1, 4, 2, 6, 6)
    call(q, k, alibi_slopes=make_slopes(4))


def test_contract_errors_for_alibi_slopes():
    q, k = make_inputs(1, 4, 2, 8, 8)
    v = make_values(1, 2, 8)
    calls = {
        "attention_entropy": lambda a: attention_entropy(q, k, softmax_scale=0.3, alibi_slopes=a),
        "reference": lambda a: attention_entropy(
            q, k, softmax_scale=0.3, alibi_slopes=a, backend="reference"
        ),
        "ScoreMods.build": lambda a: ScoreMods.build(q, k, alibi_slopes=a),
        "streamed": lambda a: attention_with_entropy(
            q, k, v, softmax_scale=0.3, alibi_slopes=a, backend="torch_chunked"
        ),
        "native": lambda a: attention_with_entropy(
            q, k, v, softmax_scale=0.3, alibi_slopes=a, backend="native"
        ),
        "shard_state": lambda a: shard_state(q, k, 0.3, key_offset=0, total_keys=8, alibi_slopes=a),
    }
    for bad, match in [
        (torch.ones(3), r"shape \(4,\)"),
        (torch.ones(1, 4), r"shape \(4,\)"),
        (torch.ones(2), r"shape \(4,\)"),  # one slope per key head is not enough: per query head
        (torch.ones(4, dtype=torch.long), "float tensor"),
        ([0.5] * 4, "float tensor"),
        (0.5, "float tensor"),
        (torch.tensor([0.5, math.inf, 0.1, 0.2]), "finite"),
        (torch.tensor([0.5, math.nan, 0.1, 0.2]), "finite"),
    ]:
        for call in calls.values():
            with pytest.raises(ValueError, match=match):
                call(bad)
            with pytest.raises(ValueError, match="alibi_slopes"):
                call(bad)
    # any float dtype: bf16 slopes are taken as they are (exactly, in fp32)
    slopes = make_slopes(4).to(torch.bfloat16)
    h = attention_entropy(q, k, softmax_scale=0.3, alibi_slopes=slopes)
    ref = attention_entropy(q, k, softmax_scale=0.3, alibi_slopes=slopes.float(), backend="reference")
    assert (h - ref).abs().max().item() <= 1e-5
