"""Every per-row statistic of kernels.stats.ROW_STATS from the streaming pass (`attention_stats`) against
its float64 definition (kernels/reference.py), within 1e-5 relative to max(1, |value|): the kernel
grid (MHA/GQA/MQA, T < S and T > S with rows that see no key, masks, windows, softcap, sinks, ALiBi, a
key bias, odd tiles) on both CPU kernels, separate and with the output, key shards merged, and a kernel
that does not compute a statistic refused in one line (the Triton kernel's cases run under the
interpreter: tests/triton_interp_cases.py)."""

import functools
import importlib
import itertools
import subprocess
import sys

import numpy as np
import pytest
import torch
from kernel_cases import RUNNABLE, TILES, make_inputs, make_sinks, make_slopes, make_values, mask_kinds

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import (
    ROW_STATS,
    attention_stats,
    attention_with_entropy,
    merge_states,
    native_available,
    shard_state,
    sink_state,
)
from entropy_lens.kernels.stats import read_stats

ALL = tuple(ROW_STATS)
CPU_KERNELS = [param for param in RUNNABLE if param.values[0] != "triton"]
EXTRA_CASES = {
    "plain": {},
    "sinks": {"sinks": True},
    "softcap+window": {"softcap": 2.5, "window": 5},
    "alibi+sinks": {"alibi": True, "sinks": True},
    "key_bias": {"key_bias": True},
}


def _kwargs(case, B, Hq, S, causal):
    spec = EXTRA_CASES[case]
    kw = {}
    if spec.get("sinks"):
        kw["sinks"] = make_sinks(Hq)
    if "softcap" in spec:
        kw["softcap"] = spec["softcap"]
    if "window" in spec and causal:
        kw["window"] = spec["window"]
    if spec.get("alibi"):
        kw["alibi_slopes"] = make_slopes(Hq, 0.5)
    if spec.get("key_bias"):
        kw["key_bias"] = torch.randn(B, Hq, S, generator=torch.Generator().manual_seed(5))
    return kw


def assert_close_relative(got: dict, want: dict, tol=1e-5):
    for name, values in want.items():
        err = ((got[name] - values).abs() / values.abs().clamp_min(1.0)).max().item()
        assert err <= tol, (name, err)
        assert torch.isfinite(got[name]).all(), name


@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("T,S", [(21, 21), (9, 30), (14, 6)], ids=["square", "T<S", "T>S"])
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("case", EXTRA_CASES)
@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_every_statistic_equals_its_definition(kernel, Hq, Hkv, T, S, mask_kind, causal, case):
    B = 2
    q, k = make_inputs(B, Hq, Hkv, T, S)
    kw = _kwargs(case, B, Hq, S, causal) | {"mask": mask_kinds(B, Hq, T, S)[mask_kind], "causal": causal}
    scale = torch.linspace(0.2, 0.7, Hq)
    want = attention_stats(q, k, softmax_scale=scale, stats=ALL, first_keys=3, backend="reference", **kw)
    v = make_values(B, Hkv, S)
    for bq, bk in TILES[kernel]:
        blocks = {"block_q": bq, "block_k": bk}
        got = attention_stats(
            q, k, softmax_scale=scale, stats=ALL, first_keys=3, backend=kernel, **blocks, **kw
        )
        assert set(got) == set(ALL) and all(
            v.shape == (B, Hq, T) and v.dtype == torch.float32 for v in got.values()
        )
        assert_close_relative(got, want)
        fused = attention_with_entropy(
            q, k, v, softmax_scale=scale, stats=ALL, first_keys=3, backend=kernel, **blocks, **kw
        )
        assert_close_relative(fused, want)


def test_rows_without_keys_are_zero_and_a_sink_decides_them():
    """T > S bottom-right: the first T − S rows see no key: 0 in every statistic; with a sink their one
    outcome is the sink: max_prob = 1, sink_mass = 1, the rest 0."""
    q, k = make_inputs(1, 2, 1, 9, 4)
    plain = attention_stats(q, k, softmax_scale=0.5, stats=ALL)
    assert all(torch.equal(v[..., :5], torch.zeros(1, 2, 5)) for v in plain.values())
    sunk = attention_stats(q, k, softmax_scale=0.5, stats=ALL, sinks=torch.tensor([1.0, -2.0]))
    ones = {"max_prob", "sink_mass"}
    for name, values in sunk.items():
        assert torch.allclose(values[..., :5], torch.full((1, 2, 5), float(name in ones)), atol=1e-6), name


@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_peaked_far_rows_keep_their_distance_and_first_mass(kernel):
    """A head that looks only at the first key from far away: distance = the row's position, first_mass
    = 1, max_prob = 1, both entropies 0 (the distance is summed from the row, not key positions)."""
    T = 3000
    q = torch.ones(1, 1, T, 4)
    k = torch.zeros(1, 1, T, 4)
    k[..., 0, :] = 30.0  # key 0 scores 120 more than any other
    got = attention_stats(q, k, softmax_scale=1.0, stats=ALL, backend=kernel, block_q=256, block_k=512)
    pos = torch.arange(T, dtype=torch.float32)
    assert torch.allclose(got["distance"][0, 0], pos, rtol=1e-6)
    assert torch.allclose(got["first_mass"], torch.ones(1, 1, T)) and torch.allclose(
        got["max_prob"], torch.ones(1, 1, T)
    )
    assert got["entropy"].abs().max() < 1e-5 and got["collision_entropy"].abs().max() < 1e-5


@pytest.mark.parametrize("cuts", [[7], [3, 11, 19], [0, 5, 5, 30]], ids=["two", "four", "empty"])
@pytest.mark.parametrize("sinks", [False, True])
def test_key_shards_merge_to_every_statistic_of_the_whole(cuts, sinks):
    """Each accumulator merges exactly (merge.merge_states): shards in any order, an empty one, the sink
    as one more state merged once."""
    B, Hq, Hkv, T, S = 2, 4, 2, 12, 30
    q, k = make_inputs(B, Hq, Hkv, T, S)
    kw = {"alibi_slopes": make_slopes(Hq, 0.3), "softcap": 3.0}
    bounds = [0, *cuts, S]
    states = [
        shard_state(
            q,
            k[:, :, a:b],
            0.4,
            key_offset=a,
            total_keys=S,
            stats=ALL,
            first_keys=4,
            block_q=5,
            block_k=4,
            **kw,
        )
        for a, b in itertools.pairwise(bounds)
    ]
    sink = make_sinks(Hq) if sinks else None
    if sinks:
        states.insert(1, sink_state(sink, B, T, stats=ALL))
    merged = functools.reduce(merge_states, reversed(states))
    got = read_stats(merged, _mods(q, k, sink), ALL)
    want = attention_stats(
        q, k, softmax_scale=0.4, stats=ALL, first_keys=4, backend="reference", sinks=sink, **kw
    )
    assert_close_relative(got, want)
    with pytest.raises(ValueError, match="different statistics"):
        merge_states(states[0], shard_state(q, k, 0.4, key_offset=0, total_keys=S))


def _mods(q, k, sinks):
    from entropy_lens.kernels import ScoreMods

    return ScoreMods.build(q, k, sinks=sinks)


def test_a_kernel_that_does_not_compute_a_statistic_says_so_and_auto_picks_one_that_does(monkeypatch):
    """plan.KERNEL_STATS holds a kernel that computes only some statistics (a new one lands kernel by
    kernel): naming it is refused in one line, "auto" routes around it."""
    plan = importlib.import_module(
        "entropy_lens.kernels.plan"
    )  # the module (the package exports the function)
    monkeypatch.setitem(plan.KERNEL_STATS, "native", ("entropy", "sink_mass"))
    q, k = make_inputs(1, 4, 2, 8, 8)
    if native_available():
        with pytest.raises(EntropyLensError, match="native kernel does not compute max_prob yet"):
            attention_stats(q, k, softmax_scale=0.3, stats=("entropy", "max_prob"), backend="native")
        mods = _mods(q, k, None)
        assert plan.statistics_kernel("auto", q, k, mods, one_pass=True, stats=("entropy",))[0] == "native"
        assert (
            plan.statistics_kernel("auto", q, k, mods, one_pass=True, stats=("max_prob",))[0]
            == "torch_chunked"
        )
    got = attention_stats(q, k, softmax_scale=0.3, stats=("max_prob",), backend="auto")
    want = attention_stats(q, k, softmax_scale=0.3, stats=("max_prob",), backend="reference")
    assert_close_relative(got, want)
    with pytest.raises(ValueError, match="unknown row statistic"):
        attention_stats(q, k, softmax_scale=0.3, stats=("fading",))
    with pytest.raises(ValueError, match=r"first_keys must be at least 1 and at most 4194304 \(got 0\)"):
        attention_stats(q, k, softmax_scale=0.3, stats=("first_mass",), first_keys=0)


@pytest.mark.parametrize("model_type", ["llama", "gpt_oss", "bloom", "gemma2"])
def test_the_recorder_records_every_statistic_the_models_own_attention_has(model_type):
    """Through the capture (GQA, sinks, ALiBi routed through the model's own layers, softcap), each
    statistic's mean by position equals its definition on the model's eager probabilities (the model in
    float64, so the comparison holds the kernels' fp32 accumulation to 1e-5)."""
    from architectures import SUPPORTED, build, eager_probabilities, mean_by_position

    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.kernels.reference import DEFINITIONS, first_window, key_distance

    # eager in float64: no rounding of its own (gpt-oss's experts run in float32 only: its eager
    # probabilities carry fp32 rounding, about 5e-6, so it is held to 2e-5 as the entropy tests hold it)
    model = build(model_type, SUPPORTED[model_type][0])
    model, tol = (model, 2e-5) if model_type == "gpt_oss" else (model.double(), 1e-5)
    ids = torch.randint(3, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    _, probs = eager_probabilities(model, ids, None)
    with EntropyRecorder(model, stats=ALL, first_keys=2) as rec, torch.no_grad():
        model(ids)
    behind, first = key_distance(12, 12).double(), first_window(12, 2)  # no padding: keys 0 and 1
    for name in ALL:
        if name == "sink_mass" and not rec.has_sinks:
            assert rec.mean(name) is None
            continue
        want = []
        for (
            p
        ) in probs:  # a sink's share is what the probabilities leave of 1 (eager's softmax rounds in fp32)
            sink = (
                (1.0 - p.sum(-1)).clamp_min(0.0) if rec.has_sinks else torch.zeros(p.shape[:3], dtype=p.dtype)
            )
            want.append(DEFINITIONS[name](p, sink, torch.ones(p.shape[:3], dtype=torch.bool), behind, first))
        np.testing.assert_allclose(
            rec.mean(name), mean_by_position(want, None), atol=tol, rtol=1e-5, err_msg=name
        )


def test_units_and_descriptions_are_declared_once_and_read_without_torch():
    """The kernels compute exactly the statistics of the torch-free table (choices.ROW_STAT_INFO), in its
    order, and take their units and descriptions from it; entropy_lens.results reads it without importing torch."""
    from entropy_lens.choices import ROW_STAT_INFO

    assert tuple(ROW_STATS) == tuple(ROW_STAT_INFO)
    for name, stat in ROW_STATS.items():
        assert (stat.unit, stat.description) == (ROW_STAT_INFO[name].unit, ROW_STAT_INFO[name].description)
    code = "import sys, entropy_lens.results, entropy_lens.choices; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_scan_records_the_statistics_it_is_asked_for(tmp_path):
    """--stats puts one array per statistic beside entropy, reduced as entropy is, with its unit and K in
    the meta; the default scan records entropy alone; a name that is not a statistic is one line."""
    from architectures import SUPPORTED, save_folder

    from entropy_lens.results import ARRAYS, SCHEMA_VERSION, ScanResult, summary
    from entropy_lens.runs.scan import ScanConfig, scan

    folder = save_folder(tmp_path, "llama", SUPPORTED["llama"][0])
    base = {"model": str(folder), "length": 16, "samples": 2, "data": "austen:persuasion", "dtype": "float32"}
    scan(
        ScanConfig(**base, stats="max_prob,first_mass", first_keys=2), out=tmp_path / "s.npz", progress=False
    )
    scan(ScanConfig(**base, stats="all", entropy="mean"), out=tmp_path / "m.npz", progress=False)
    scan(ScanConfig(**base), out=tmp_path / "plain.npz", progress=False)
    got, mean, plain = (ScanResult.load(tmp_path / f"{n}.npz") for n in ("s", "m", "plain"))
    assert set(got.stats) == {"max_prob", "max_prob_sq", "first_mass", "first_mass_sq"}
    assert got.stats["max_prob"].shape == got.stats["max_prob_sq"].shape == got.entropy.shape
    assert (got.stats["max_prob_sq"] >= got.stats["max_prob"] ** 2 - 1e-6).all()  # a mean square
    assert got.meta["stats"] == {"entropy": "nats", "max_prob": "probability", "first_mass": "probability"}
    # entropy as without --stats (to the kernels' rounding: "auto" runs torch_chunked for these statistics)
    assert got.meta["first_keys"] == 2 and np.allclose(got.entropy, plain.entropy, atol=1e-5, rtol=0)
    table = summary(got).split("\n\n")[1].splitlines()  # the scan's summary: a column per statistic
    assert table[0].split()[-2:] == ["max_prob", "first_mass"] and table[-1].endswith("K = 2 keys")
    assert float(table[-2].split()[-2]) == pytest.approx(
        got.stats["max_prob"][:, :, -(16 // 10) :].mean(), abs=1e-3
    )
    assert "\n\n" not in summary(plain)  # entropy alone: the table as before --stats
    extra = set(ALL) - {"entropy", "sink_mass"}
    assert (
        set(mean.stats) == extra | {f"{name}_sq" for name in extra} and mean.stats["distance"].shape[1] == 1
    )
    assert plain.stats == {} and "stats" not in plain.meta and plain.meta["scan_config"]["stats"] == "entropy"
    assert ((got.stats["first_mass"] > 0) & (got.stats["first_mass"] <= 1 + 1e-6)).all()
    # the schema went up with the statistics; a file without them is written as version 1 (issue 48: a
    # reader of version 1 opens it), and a file of version 1 (entropy alone) loads unchanged
    assert got.meta["schema_version"] == SCHEMA_VERSION == 2 and plain.meta["schema_version"] == 1
    old = ScanResult(**{k: getattr(plain, k) for k in ARRAYS}, meta={**plain.meta, "schema_version": 1})
    again = ScanResult.load(old.save(tmp_path / "v1.npz"))
    assert again.meta == old.meta and all(
        np.array_equal(getattr(again, k), getattr(plain, k)) for k in ARRAYS
    )
    newer = ScanResult(**{k: getattr(plain, k) for k in ARRAYS}, meta={**plain.meta, "schema_version": 3})
    with pytest.raises(EntropyLensError, match="has schema_version 3, this entropy-lens reads 1, 2"):
        ScanResult.load(newer.save(tmp_path / "v3.npz"))
    with pytest.raises(EntropyLensError, match="--stats: unknown row statistic"):
        ScanConfig(**base, stats="max_prob,fading").check()
    with pytest.raises(EntropyLensError, match="needs --record heads or mean, not none"):
        ScanConfig(**base, stats="all", entropy="none").check()
