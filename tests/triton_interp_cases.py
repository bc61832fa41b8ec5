"""The Triton kernel's own cases against the float64 reference under the interpreter (CPU): its 32-wide
blocks (interior blocks without masks, windows around a block, a first block fully masked), strides, head
sizes, the launcher's calls (the kernel called directly, its output layout, the masks it refuses) and the
fused pass inside a model. The grids every kernel shares (kernel_cases.RUNNABLE) are in test_kernels.py,
test_kernels_extras.py and test_kernels_alibi.py.

Not collected by default (the name does not start with test_): tests/kernels/test_triton_interp.py runs this file
and the shared grids' triton cases in their own process with TRITON_INTERPRET=1, so the interpreter never
leaks into other tests. On a GPU it runs as is: `pytest tests/triton_interp_cases.py` (the shared grids
run there in any pytest run, on CUDA).
"""

import os

import pytest
import torch

pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    pytest.skip("needs TRITON_INTERPRET=1 (set before import) or a CUDA device", allow_module_level=True)

from capture_cases import CPU_FUSED_BACKEND, MASK_KINDS, recorded_backends
from kernel_cases import (
    EXTRAS,
    definition,
    device,
    hf_mask,
    make_inputs,
    make_sinks,
    make_slopes,
    make_values,
    mask_kinds,
    on_device,
    reference_output,
)
from kernel_grid import over_the_cover

from entropy_lens.flags import Measure
from entropy_lens.kernels import (
    ROW_STATS,
    ScoreMods,
    attention_entropy,
    attention_stats,
    run,
    statistics_kernel,
)
from entropy_lens.kernels.contract import validate_scale

DEVICE = device("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy evaluates both sides of tl.where


def launch(q, k, v, softmax_scale, stats=("entropy", "sink_mass"), first_keys=1, recent_keys=64, **mods):
    """RowStats of `stats` from the Triton launcher itself (no plan in between) on DEVICE: `mods` are the
    score modifiers' keywords, v None for the entropy pass; the output is (B, T, Hq, D)."""
    q, k = q.to(DEVICE), k.to(DEVICE)
    mods = ScoreMods.build(q, k, **on_device(mods, DEVICE))
    v = None if v is None else v.to(DEVICE)
    measure = Measure.parse(stats=stats, first_keys=first_keys, recent_keys=recent_keys)
    return run("triton", q, k, v, validate_scale(q, k, softmax_scale), mods, measure=measure)


def _run(q, k, **kw):
    got = attention_entropy(q.to(DEVICE), k.to(DEVICE), backend="triton", **kw).cpu()
    ref = attention_entropy(q, k, backend="reference", **kw)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    return got, ref


@pytest.mark.parametrize("T,S", [(40, 150), (100, 100), (70, 200), (150, 40)])
@pytest.mark.parametrize("causal", [True, False])
def test_unmasked_interior_blocks_then_masked_diagonal(T, S, causal):
    """Several key blocks seen whole by every row (run without masks) before the masked ones."""
    q, k = make_inputs(1, 4, 2, T, S)
    got, ref = _run(q, k, softmax_scale=torch.linspace(0.1, 0.5, 4), causal=causal)
    assert (got - ref).abs().max().item() <= 1e-5


@over_the_cover(
    {
        "T,S": {"square": (100, 100), "T<S": (40, 150), "T>S": (150, 40)},
        "window": [1, 5, 32, 45, 130],
        "padded": [False, True],
    }
)
def test_sliding_window_skips_blocks_behind_it(T, S, window, padded):
    """Windows narrower than, equal to and wider than a block (32 here), unmasked blocks between
    the masked far edge and diagonal, as an argument and as transformers' (B, 1, T, S) mask."""
    q, k = make_inputs(2, 2, 1, T, S)  # GQA
    keep = torch.ones(2, S, dtype=torch.bool)
    if padded:
        keep[1, : S // 3] = False
    scale = torch.tensor([0.2, 0.5])
    got, ref = _run(q, k, softmax_scale=scale, window=window, mask=keep.to(DEVICE) if padded else None)
    assert (got - ref).abs().max().item() <= 1e-5
    from_mask, _ = _run(q, k, softmax_scale=scale, mask=hf_mask(keep, T, S, window).to(DEVICE))
    assert (from_mask - ref).abs().max().item() <= 1e-5


def test_first_key_block_fully_masked_and_fully_padded_rows():
    q, k = make_inputs(2, 4, 2, 40, 90)
    keep = torch.ones(2, 90, dtype=torch.bool)
    keep[0, :70] = False  # rows' first two key blocks (32 wide) see nothing: m = -inf there
    keep[1] = False  # a fully padded sequence: every row 0
    got, ref = _run(q, k, softmax_scale=0.4, mask=keep.to(DEVICE))
    assert torch.equal(got[1], torch.zeros(4, 40)) and (got - ref).abs().max().item() <= 1e-5


def test_peaked_rows_and_head_dim_not_a_power_of_two():
    q, k = make_inputs(1, 2, 1, 50, 50, D=24)
    got, ref = _run(q, k, softmax_scale=torch.tensor([40.0, 0.05]))  # near one-hot vs near uniform
    assert (got - ref).abs().max().item() <= 1e-4


def test_strided_inputs():
    q, k = make_inputs(2, 4, 2, 30, 30)
    q_t, k_t = q.transpose(1, 2).contiguous().transpose(1, 2), k.transpose(1, 2).contiguous().transpose(1, 2)
    assert not q_t.is_contiguous()  # (B, T, H, D) memory, as a model's projections lay it out
    got, ref = _run(q_t, k_t, softmax_scale=0.3)
    assert (got - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("T", [64, pytest.param(1000, marks=pytest.mark.full)], ids=["last-rows", "square"])
def test_near_1k_tokens_gqa_bf16(T):
    """bf16 rows streaming up to 1,000 keys (31 key blocks) under GQA: by default the last 64 rows of a
    1,000-token sequence (the longest rows, a few programs); the whole square (1,000 rows, 20 s under
    the interpreter) under make test-full."""
    q, k = make_inputs(1, 4, 2, T, 1000, D=32, dtype=torch.bfloat16)
    got, ref = _run(q, k, softmax_scale=torch.tensor([0.1, 0.2, 0.3, 0.4]))
    assert (got - ref).abs().max().item() <= 1e-3


@pytest.mark.parametrize("extras", list(EXTRAS))
@pytest.mark.parametrize("causal,window", [(True, None), (False, None), (True, 7)])
def test_fused_output_with_softcap_and_sinks_fp32(extras, causal, window):
    softcap, with_sinks = EXTRAS[extras]
    q, k = make_inputs(2, 6, 2, 45, 45, D=24)
    v = make_values(2, 2, 45, Dv=24)
    keep = torch.ones(2, 45, dtype=torch.bool)
    keep[1, :40] = False  # early rows of sequence 1 see no key: output 0, entropy 0 (p_sink = 1)
    scale, sinks = torch.linspace(0.2, 0.7, 6), make_sinks(6) if with_sinks else None
    rows = launch(
        q,
        k,
        v,
        scale,
        causal=causal,
        mask=keep[:, None, None, :],
        window=window,
        softcap=softcap,
        sinks=sinks,
    )
    out, ent, p = rows.out, rows["entropy"], rows["sink_mass"]
    kw = {
        "softmax_scale": scale,
        "causal": causal,
        "mask": keep,
        "window": window,
        "softcap": softcap,
        "sinks": sinks,
    }
    ref_h, ref_p = attention_entropy(q, k, backend="reference", return_sink_mass=True, **kw)
    ref_out = reference_output(q, k, v, **kw)
    assert (out.cpu().double() - ref_out).abs().max().item() <= 1e-5
    assert (ent.cpu() - ref_h).abs().max().item() <= 1e-5 and (p.cpu() - ref_p).abs().max().item() <= 1e-6


# -- ALiBi (alibi_slopes), alone and with softcap and sinks: separate and fused against float64 -----------


@pytest.mark.parametrize("T,S", [(40, 150), (100, 100), (150, 40)])
@pytest.mark.parametrize("causal,window", [(True, None), (False, None), (True, 100)])
def test_alibi_in_unmasked_interior_blocks(T, S, causal, window):
    """Key blocks every row sees whole run without masks, but not without the bias: several of them
    (32 wide here) lie before the masked diagonal, and behind a wide window's far edge."""
    q, k = make_inputs(1, 4, 2, T, S)
    v = make_values(1, 2, S, Dv=16)
    kw = {
        "softmax_scale": torch.linspace(0.1, 0.5, 4),
        "causal": causal,
        "window": window,
        "alibi_slopes": make_slopes(4, factor=0.25),  # gentle: distant keys keep some weight
    }
    ref = attention_entropy(q, k, backend="reference", **kw)
    got = attention_entropy(q.to(DEVICE), k.to(DEVICE), backend="triton", **on_device(kw, DEVICE))
    assert (got.cpu() - ref).abs().max().item() <= 1e-5
    rows = launch(q, k, v, **kw)
    _, _, want_out = definition(q, k, v, **kw)
    assert (rows.out.cpu().double() - want_out).abs().max().item() <= 1e-5
    assert (rows["entropy"].cpu() - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("causal,window", [(True, None), (False, None), (True, 7)])
def test_alibi_zero_slopes_change_nothing(causal, window):
    """alibi_slopes of zeros runs the HAS_ALIBI variant and gives the numbers of alibi_slopes=None (two
    query heads on one key head: a zero bias changes nothing whatever the head count)."""
    q, k = make_inputs(2, 2, 1, 45, 70)
    v = make_values(2, 1, 70, Dv=16)
    keep = torch.ones(2, 1, 1, 70, dtype=torch.bool)
    keep[1, ..., :20] = False
    scale = torch.tensor([0.2, 0.7])
    kw = {"causal": causal, "mask": keep, "window": window, "softcap": 3.0, "sinks": make_sinks(2)}
    for values in (None, v):  # the entropy pass, the fused pass
        plain = launch(q, k, values, scale, **kw)
        alibi = launch(q, k, values, scale, alibi_slopes=torch.zeros(2), **kw)
        pairs = [(plain[name], alibi[name]) for name in ("entropy", "sink_mass")]
        pairs += [] if values is None else [(plain.out, alibi.out)]
        for x, y in pairs:
            assert (x.cpu() - y.cpu()).abs().max().item() <= 1e-6


def test_alibi_transformers_masks_go_to_the_kernel():
    """transformers' causal + padding and sliding-window masks with ALiBi: the kernel takes them
    (statistics_kernel says triton), and the entropy is the float64 one."""
    q, k = make_inputs(2, 4, 2, 40, 40)
    keep = torch.ones(2, 40, dtype=torch.bool)
    keep[1, :13] = False  # left padding
    slopes = make_slopes(4, factor=2.0)
    for window in (None, 6):
        mask = hf_mask(keep, 40, 40, window)
        kw = {"mask": mask, "alibi_slopes": slopes}
        qd, kd = q.to(DEVICE), k.to(DEVICE)
        assert (
            statistics_kernel("triton", qd, kd, ScoreMods.build(qd, kd, **on_device(kw, DEVICE)))[0]
            == "triton"
        )
        kw["softmax_scale"] = 0.3
        got = attention_entropy(qd, kd, backend="triton", **on_device(kw, DEVICE)).cpu()
        ref = attention_entropy(q, k, backend="reference", **kw)
        assert (got - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (6, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal,window", [(True, None), (False, None), (True, 7), (True, 40)])
def test_fused_output_and_entropy_fp32(Hq, Hkv, causal, window):
    q, k = make_inputs(2, Hq, Hkv, 45, 45, D=24)
    v = torch.randn(2, Hkv, 45, 24, generator=torch.Generator().manual_seed(3))
    keep = torch.ones(2, 45, dtype=torch.bool)
    keep[1, :40] = False  # early rows of sequence 1 see no key: output 0, entropy 0
    scale = torch.linspace(0.2, 0.7, Hq)
    rows = launch(q, k, v, scale, causal=causal, mask=keep[:, None, None, :], window=window)
    out, ent = rows.out, rows["entropy"]
    ref_ent = attention_entropy(
        q, k, softmax_scale=scale, causal=causal, mask=keep, window=window, backend="reference"
    )
    ref_out = reference_output(q, k, v, scale, causal, keep, window)  # (B, T, Hq, D), as the output
    assert out.dtype == torch.float32 and (out.cpu().double() - ref_out).abs().max().item() <= 1e-5
    assert (ent.cpu() - ref_ent).abs().max().item() <= 1e-5


def test_fused_bf16_output_within_twice_plain_pytorch():
    q, k = make_inputs(1, 4, 2, 80, 80, D=32, dtype=torch.bfloat16)
    v = torch.randn(1, 2, 80, 32, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    scale = 32**-0.5
    out = launch(q, k, v, scale).out
    ref = reference_output(q, k, v, scale)  # (B, T, Hq, D), as the output
    plain = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=scale, enable_gqa=True
    ).transpose(1, 2)
    err_plain = (plain.double() - ref).abs().max().item()
    assert out.dtype == torch.bfloat16 and (out.cpu().double() - ref).abs().max().item() <= 2 * err_plain


@pytest.mark.parametrize("fused", ["on", "off"])
def test_the_backend_recorded_is_the_one_that_ran(fused):
    """The Triton kernel (fused or not) for the masks it takes; for per-query and per-head masks the
    separate pass's torch_chunked, or the device's own fused pass (on CPU the native kernel where it
    builds); and the session records which."""
    triton_kinds = ("none", "key_padding", "causal_padding", "sliding_window")
    other = CPU_FUSED_BACKEND if fused == "on" and DEVICE == "cpu" else "torch_chunked"
    want = {kind: {"triton" if kind in triton_kinds else other} for kind in MASK_KINDS}
    assert recorded_backends("triton", fused, DEVICE) == want


def test_statistics_kernel_and_the_launcher_agree_on_which_masks_the_kernel_takes():
    q, k = (x.to(DEVICE) for x in make_inputs(2, 4, 2, 9, 9))
    for kind, mask in mask_kinds(2, 4, 9, 9).items():
        mods = ScoreMods.build(q, k, mask=None if mask is None else mask.to(DEVICE))
        backend, _ = statistics_kernel("triton", q, k, mods)
        assert backend == ("torch_chunked" if kind == "4d_per_head" else "triton")
        if backend == "triton":
            launch(q, k, None, 0.3, mask=mods.mask)
        else:
            with pytest.raises(ValueError, match="key padding and sliding-window masks only"):
                launch(q, k, None, 0.3, mask=mods.mask)


# -- every row statistic (stats.ROW_STATS), separate and fused, against float64 ---------------------------

ALL = tuple(ROW_STATS)
# GQA/MQA/MHA, T < S and T > S (the first T − S rows see no key), key padding over a whole 32-wide block
# (the first block of a row fully masked: m = −inf there) and a fully padded sequence, windows (one key
# wide, narrower and wider than a block), softcap, sinks, ALiBi, causal and not, a head size that is not a
# power of two, first_mass's K inside the first block, across two blocks and past S, recent_mass's W one
# key, inside a block, across blocks, wider and narrower than a sliding window and past S. The head counts
# are the least that keep each case's kind (what a statistic means does not depend on them): one case of
# two key heads (a group's key head past the first), the others two or three query heads on one
STATS_CASES = {  # name: ((B, Hq, Hkv, T, S, D), the score modifiers, padding, K, W)
    "gqa-causal-padded": ((2, 4, 2, 45, 70, 16), {}, "left", 3, 5),
    "mqa-T>S": ((2, 3, 1, 70, 40, 16), {}, "none", 1, 33),
    "mha-noncausal-D24": ((1, 2, 2, 37, 53, 24), {"causal": False}, "left", 40, 7),
    "gqa-window-softcap-sinks": (
        (2, 2, 1, 70, 70, 16),
        {"window": 7, "softcap": 2.5, "sinks": True},
        "left",
        5,
        3,
    ),
    "mqa-sinks-T>S-padded": ((2, 3, 1, 50, 35, 16), {"sinks": True}, "all", 2, 1),
    "gqa-alibi-sinks-window": (
        (1, 2, 1, 40, 100, 16),
        {"alibi": True, "sinks": True, "window": 45},
        "none",
        1,
        40,
    ),
    "gqa-alibi-noncausal": (
        (2, 2, 1, 33, 65, 16),
        {"alibi": True, "softcap": 3.0, "causal": False},
        "left",
        999,
        64,
    ),
    "mha-window-one-key": ((1, 2, 2, 40, 72, 16), {"window": 1}, "none", 33, 2),
    "gqa-noncausal-sinks-T>S": ((2, 2, 1, 66, 34, 16), {"causal": False, "sinks": True}, "left", 33, 999),
    "mqa-wide-window-padded": ((2, 3, 1, 64, 96, 16), {"window": 45, "softcap": 2.0}, "left", 64, 20),
}


def _stats_inputs(B, Hq, Hkv, T, S, D, mods, padding):
    q, k = make_inputs(B, Hq, Hkv, T, S, D=D)
    v = make_values(B, Hkv, S, Dv=D)
    kw = {key: val for key, val in mods.items() if key not in ("sinks", "alibi")}
    kw["softmax_scale"] = torch.linspace(0.2, 0.7, Hq)
    if mods.get("sinks"):
        kw["sinks"] = make_sinks(Hq)
    if mods.get("alibi"):
        kw["alibi_slopes"] = make_slopes(Hq, factor=0.25)
    if padding != "none":
        keep = torch.ones(B, S, dtype=torch.bool)
        keep[-1, : min(S - 3, 40)] = False  # the first 32-wide key block of the last sequence fully masked
        if padding == "all" and B > 1:
            keep[0] = False  # a fully padded sequence: every row sees no key
        kw["mask"] = keep
    return q, k, v, kw


def assert_stats_close(got, want, tol=1e-5):
    """Each statistic within `tol` of the float64 one relative to max(1, |value|), and finite."""
    for name, values in want.items():
        err = ((got[name].cpu() - values).abs() / values.abs().clamp_min(1.0)).max().item()
        assert err <= tol and torch.isfinite(got[name]).all(), (name, err)


@pytest.mark.parametrize("case", list(STATS_CASES))
def test_every_statistic_separate_and_fused(case):
    """Every statistic from the kernel's final state (stats.read_stats) against its float64 definition,
    the separate pass through `attention_stats` (plan.run hands first_keys to the kernel) and the fused
    one through the launcher; the fused output is the float64 one, and the output, entropy and sink mass
    those of the default pass (entropy and sink mass read in the kernel): the extra accumulators change
    nothing else."""
    (B, Hq, Hkv, T, S, D), mods, padding, K, W = STATS_CASES[case]
    q, k, v, kw = _stats_inputs(B, Hq, Hkv, T, S, D, mods, padding)
    keys = {"first_keys": K, "recent_keys": W}
    want = attention_stats(q, k, stats=ALL, **keys, backend="reference", **kw)
    separate = attention_stats(
        q.to(DEVICE), k.to(DEVICE), stats=ALL, **keys, backend="triton", **on_device(kw, DEVICE)
    )
    assert list(separate) == list(ALL)
    assert_stats_close(separate, want)
    scale = kw.pop("softmax_scale")
    fused = launch(q, k, v, scale, stats=ALL, **keys, **kw)
    assert list(fused) == list(ALL) and fused.out.shape == (B, T, Hq, D)
    assert_stats_close(fused, want)
    _, _, want_out = definition(q, k, v, scale, **kw)
    assert (fused.out.cpu().double() - want_out).abs().max().item() <= 1e-5
    default = launch(q, k, v, scale, **kw)  # entropy and sink mass in the kernel, no extra accumulator
    assert (fused.out.cpu() - default.out.cpu()).abs().max().item() <= 1e-6
    for name in ("entropy", "sink_mass"):
        assert (fused[name].cpu() - default[name].cpu()).abs().max().item() <= 1e-6, name


@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize(
    "stats",
    [
        ("max_prob",),
        ("distance",),
        ("entropy", "first_mass"),
        ("sink_mass", "collision_entropy", "varentropy"),
        ("max_logit",),
        ("recent_mass",),
        ("entropy", "first_mass", "recent_mass"),
    ],
)
def test_a_subset_keeps_only_its_accumulators(stats, sinks):
    """Statistics asked for alone: the state without any extra (max_prob), distance's key sum (l itself
    without a sink, its own accumulator with one), first_mass beside the entropy, the max logit (m itself
    without a sink, its own accumulator with one), recent_mass alone and beside first_mass, and so on."""
    q, k = make_inputs(2, 4, 2, 40, 50)
    kw = {"softmax_scale": 0.4, "sinks": make_sinks(4) if sinks else None}
    keys = {"first_keys": 2, "recent_keys": 9}  # recent_mass's window inside a 32-wide block, or across two
    want = attention_stats(q, k, stats=stats, **keys, backend="reference", **kw)
    got = attention_stats(
        q.to(DEVICE), k.to(DEVICE), stats=stats, **keys, backend="triton", **on_device(kw, DEVICE)
    )
    assert list(got) == list(stats)
    assert_stats_close(got, want)


def test_far_rows_keep_their_distance():
    """Two rows 2000 keys out that look only at the first key: distance = their position exactly (summed
    from the row, not from key positions), first_mass = max_prob = 1, both entropies 0."""
    S = 2000
    q = torch.ones(1, 1, 2, 4)
    k = torch.zeros(1, 1, S, 4)
    k[..., 0, :] = 30.0  # key 0 scores 120 more than any other
    got = attention_stats(q.to(DEVICE), k.to(DEVICE), softmax_scale=1.0, stats=ALL, backend="triton")
    assert torch.equal(got["distance"].cpu(), torch.tensor([[[S - 2.0, S - 1.0]]]))
    for name in ("first_mass", "max_prob"):
        assert torch.allclose(got[name].cpu(), torch.ones(1, 1, 2)), name
    assert got["entropy"].abs().max() < 1e-5 and got["collision_entropy"].abs().max() < 1e-5


# -- the fused pass inside a model (capture/fused.py) -------------------------------------------------
def _capture(model, ids, attention_mask=None, **kw):
    from entropy_lens.capture import EntropyRecorder

    with torch.no_grad(), EntropyRecorder(model, **kw) as rec:
        logits = model(ids.to(DEVICE), attention_mask=attention_mask).logits.cpu()
    return logits, rec


@pytest.mark.parametrize("padding", ["none", "left"])
@pytest.mark.parametrize("scales", [None, 1.3, "per_head"])
def test_fused_capture_matches_sdpa_and_reference(padding, scales):
    from tiny import make_tiny_model

    model = make_tiny_model(n_heads=4, n_kv_heads=2).to(DEVICE)
    if scales == "per_head":
        scales = torch.linspace(0.7, 1.6, 8).view(2, 4)
    ids = torch.randint(2, 300, (2, 40), generator=torch.Generator().manual_seed(5))
    mask = None
    if (
        padding == "left"
    ):  # transformers builds a causal + padding 4-D mask: the kernel takes it as key padding
        mask = torch.ones(2, 40, dtype=torch.long)
        mask[1, :11] = 0
        mask = mask.to(DEVICE)
    fused, rec_f = _capture(model, ids, mask, scales=scales, backend="triton", fused="on")
    plain, rec_r = _capture(model, ids, mask, scales=scales, backend="reference", fused="off")
    assert rec_f.session.paths == {"triton-fused"} and rec_r.session.paths == {"sdpa-then-entropy"}
    valid = torch.ones(2, 40, dtype=torch.bool) if mask is None else mask.bool().cpu()
    assert (fused[valid] - plain[valid]).abs().max().item() <= 1e-4
    assert abs(rec_f.entropy - rec_r.entropy).max() <= 1e-5 and (rec_f.count == rec_r.count).all()


@pytest.mark.parametrize("fused", ["on", "off"])
def test_sliding_window_model_capture_matches_reference(fused):
    """A full and a sliding-window layer (two masks, left padding): the kernel gets key padding and
    the window, fused or not."""
    from tiny import make_tiny_sliding_window_model

    model = make_tiny_sliding_window_model(window=7).to(DEVICE)
    ids = torch.randint(2, 300, (2, 45), generator=torch.Generator().manual_seed(6))
    mask = torch.ones(2, 45, dtype=torch.long)
    mask[1, :10] = 0
    got, rec_t = _capture(model, ids, mask.to(DEVICE), backend="triton", fused=fused)
    want, rec_r = _capture(model, ids, mask.to(DEVICE), backend="reference", fused="off")
    assert rec_t.session.paths == {"triton-fused" if fused == "on" else "sdpa-then-entropy"}
    assert (got[mask.bool()] - want[mask.bool()]).abs().max().item() <= 1e-4
    assert abs(rec_t.entropy - rec_r.entropy).max() <= 1e-5 and (rec_t.count == rec_r.count).all()


def test_fused_capture_steps_aside_where_it_does_not_apply():
    from tiny import make_tiny_model

    from entropy_lens.capture import EntropyRecorder

    model = make_tiny_model(n_heads=4, n_kv_heads=2).to(DEVICE)
    ids = torch.randint(2, 300, (1, 24)).to(DEVICE)
    with EntropyRecorder(
        model, backend="triton", fused="on"
    ) as rec:  # gradients wanted: sdpa computes the output
        model(ids).logits.sum().backward()
    assert rec.session.paths == {"sdpa-then-entropy"}
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None
    _, rec = _capture(model, ids, backend="triton", fused="off")
    assert rec.session.paths == {"sdpa-then-entropy"}


def test_fused_output_is_laid_out_for_o_proj():
    q, k = make_inputs(2, 4, 2, 20, 20)
    out = launch(q, k, k, 0.3).out
    assert out.shape == (2, 20, 4, 16) and out.is_contiguous()  # (B, T, Hq, D): no copy before o_proj


@pytest.mark.parametrize("fused", ["on", "off"])
def test_scan_with_the_triton_backend_matches_the_torch_path(tiny_dir, tmp_path, fused):
    import numpy as np

    from entropy_lens.results import ScanResult
    from entropy_lens.runs.scan import ScanConfig, scan

    base = {
        "model": str(tiny_dir),
        "length": 40,
        "samples": 2,
        "data": "austen:northanger",
        "device": DEVICE,
        "dtype": "float32",
    }  # fp32 on a GPU too (its default is bf16)
    # attention received too: the Triton row pass's LSE (its state stored) feeds the Triton column pass
    base["stats"] = "received,received_max,received_mean"
    got = scan(ScanConfig(**base, backend="triton", fused=fused), out=tmp_path / "t.npz", progress=False)
    want = scan(ScanConfig(**base, backend="torch_chunked"), progress=False)
    meta = ScanResult.load(tmp_path / "t.npz").meta
    assert meta["backend"] == "triton" and meta["attention_path"] == (
        "triton-fused" if fused == "on" else "sdpa-then-entropy"
    )
    assert np.abs(got.entropy - want.entropy).max() <= 1e-5 and np.abs(got.loss - want.loss).max() <= 1e-4
    for name in got.key_names:
        scale = np.abs(want.received(name)).clip(min=1.0)
        assert (np.abs(got.received(name) - want.received(name)) / scale).max() <= 1e-5, name


SLICE_EXTRAS = pytest.mark.parametrize(
    "extras",
    [{}, {"sinks": True, "softcap": 3.0}, {"padded": True, "window": 9}],
    ids=["plain", "sinks", "window"],
)


def _slice_inputs(extras: dict, seed: int):
    """(q (2, 4, 40, 16), k (2, 2, 70, 16), the score modifiers of `extras`) for the slices' cases."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 4, 40, 16, generator=g), torch.randn(2, 2, 70, 16, generator=g)
    kw = {"softcap": extras.get("softcap"), "window": extras.get("window")}
    if extras.get("sinks"):
        kw["sinks"] = torch.randn(4, generator=g)
    if extras.get("padded"):
        keep = torch.ones(2, 70, dtype=torch.bool)
        keep[0, :11] = False
        kw["mask"] = keep
    return q, k, kw


@SLICE_EXTRAS
def test_attention_probs_slices_on_the_triton_row_pass(extras):
    """attention_probs with the Triton kernel's log-sum-exp equals the float64 probabilities' slice."""
    from entropy_lens import attention_probs
    from entropy_lens.kernels import attention_probabilities

    q, k, kw = _slice_inputs(extras, seed=3)
    want, _, _ = attention_probabilities(q, k, validate_scale(q, k, 0.3), ScoreMods.build(q, k, **kw))
    got = attention_probs(
        q.to(DEVICE),
        k.to(DEVICE),
        softmax_scale=0.3,
        rows=(5, 35),
        keys=(20, 70),
        backend="triton",
        **on_device(kw, DEVICE),
    ).cpu()
    assert (got.double() - want[:, :, 5:35, 20:70]).abs().max().item() <= 1e-5


@SLICE_EXTRAS
def test_row_slice_stats_on_the_triton_row_pass(extras):
    """row_slice_stats with the Triton kernel's log-sum-exp equals the float64 definitions, distance_mass
    among them."""
    from entropy_lens import row_slice_stats
    from entropy_lens.kernels import attention_probabilities
    from entropy_lens.kernels.reference import attention_scores
    from entropy_lens.kernels.slices import Sight, slices_reference
    from entropy_lens.statistics.slices import Slices

    q, k, kw = _slice_inputs(extras, seed=4)
    asked = {"spans": {"early": (0, 20), "late": (40, 70)}, "offsets": (0, 1, 5), "top_keys": 2}
    asked["distance_bins"] = (0, 4, 30)
    stats = ("span_mass", "offset_prob", "top_key", "distance_mass")
    mods, scale = ScoreMods.build(q, k, **kw), validate_scale(q, k, 0.3)
    p, _, _ = attention_probabilities(q, k, scale, mods)
    _, visible = attention_scores(q, k, scale, mods)
    sight = Sight.of(mods, q.shape[2], k.shape[2], 0, q.shape[2])
    want = slices_reference(p, visible, sight, Slices.parse(stats, **asked))
    got = row_slice_stats(
        q.to(DEVICE),
        k.to(DEVICE),
        softmax_scale=0.3,
        stats=",".join(stats),
        backend="triton",
        **asked,
        **on_device(kw, DEVICE),
    )
    for name in ("span_mass", "offset_prob", "top_key_prob", "distance_mass"):
        assert (got[name].cpu().double() - want[name]).abs().max().item() <= 1e-5, name
    assert torch.equal(got["top_key"].cpu(), want["top_key"])
