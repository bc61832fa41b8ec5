"""Every per-row statistic of kernels.stats.ROW_STATS from the streaming pass (`attention_stats`) against
its float64 definition (kernels/reference.py), within 1e-5 relative to max(1, |value|): the kernel
grid (MHA/GQA/MQA, T < S and T > S with rows that see no key, masks, windows, softcap, sinks, ALiBi, a
key bias, odd tiles) on both CPU kernels, separate and with the output, key shards merged (the Triton
kernel's cases run under the interpreter: tests/triton_interp_cases.py); and each statistic declared
once (entropy_lens.statistics), its name written nowhere but in its declaration, read, definition and
the figures that draw it."""

import ast
import functools
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from kernel_cases import RUNNABLE, TILES, make_inputs, make_sinks, make_slopes, make_values
from kernel_grid import assert_close_relative, grid_kwargs, on_the_grid

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import (
    ROW_STATS,
    attention_stats,
    attention_with_entropy,
    merge_states,
    shard_state,
    sink_state,
)
from entropy_lens.kernels.stats import read, read_stats
from entropy_lens.statistics import (
    ENTROPY,
    FIRST_MASS,
    KEY_STATISTICS,
    MAX_LOGIT,
    RECENT_MASS,
    REDUCTIONS,
    STATISTICS,
    check_registered,
    declared,
)

ALL = tuple(ROW_STATS)
CPU_KERNELS = [param for param in RUNNABLE if param.values[0] != "triton"]


@on_the_grid
@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_every_statistic_equals_its_definition(kernel, Hq, Hkv, T, S, mask_kind, causal, case):
    B = 2
    q, k = make_inputs(B, Hq, Hkv, T, S)
    kw = grid_kwargs(case, B, Hq, T, S, mask_kind, causal)
    scale = torch.linspace(0.2, 0.7, Hq)
    # recent_mass's W = 5: a window of the keys narrower than S, crossing the tiles
    kw["recent_keys"] = 5
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
    = 1, max_prob = 1, both entropies 0 (the distance is summed from the row, not key positions), the
    max logit key 0's score."""
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
    assert torch.equal(got[MAX_LOGIT.name], torch.full((1, 1, T), 120.0))  # q·k_0, the sink excluded
    # recent_mass (W = 64): key 0 lies among the last 64 keys of rows 0-63 only
    assert torch.allclose(got[RECENT_MASS.name], (pos < 64).float().view(1, 1, T), atol=1e-6)


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
            recent_keys=6,
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
        q, k, softmax_scale=0.4, stats=ALL, first_keys=4, recent_keys=6, backend="reference", sinks=sink, **kw
    )
    assert_close_relative(got, want)
    with pytest.raises(ValueError, match="different statistics"):
        merge_states(states[0], shard_state(q, k, 0.4, key_offset=0, total_keys=S))


def _mods(q, k, sinks):
    from entropy_lens.kernels import ScoreMods

    return ScoreMods.build(q, k, sinks=sinks)


def test_an_unknown_statistic_or_k_is_refused_in_one_line():
    q, k = make_inputs(1, 4, 2, 8, 8)
    with pytest.raises(ValueError, match="unknown row statistic"):
        attention_stats(q, k, softmax_scale=0.3, stats=("fading",))
    with pytest.raises(ValueError, match=r"first_keys must be at least 1 and at most 4194304 \(got 0\)"):
        attention_stats(q, k, softmax_scale=0.3, stats=(FIRST_MASS.name,), first_keys=0)
    with pytest.raises(ValueError, match=r"recent_keys must be at least 1 and at most 4194304 \(got 0\)"):
        attention_stats(q, k, softmax_scale=0.3, stats=(RECENT_MASS.name,), recent_keys=0)


@pytest.mark.parametrize("model_type", ["llama", "gpt_oss", "bloom", "gemma2"])
def test_the_recorder_records_every_statistic_the_models_own_attention_has(model_type):
    """Through the capture (GQA, sinks, ALiBi routed through the model's own layers, softcap), each
    statistic's mean by position equals its definition on the model's eager probabilities (the model in
    float64, so the comparison holds the kernels' fp32 accumulation to 1e-5)."""
    from architectures import SUPPORTED, build, eager_probabilities, mean_by_position

    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.kernels.reference import DEFINITIONS, RowContext, first_window, key_distance

    # eager in float64: no rounding of its own (gpt-oss's experts run in float32 only: its eager
    # probabilities carry fp32 rounding, about 5e-6, so it is held to 2e-5 as the entropy tests hold it)
    model = build(model_type, SUPPORTED[model_type][0])
    model, tol = (model, 2e-5) if model_type == "gpt_oss" else (model.double(), 1e-5)
    ids = torch.randint(3, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    _, probs = eager_probabilities(model, ids, None)
    with EntropyRecorder(model, stats=ALL, first_keys=2, recent_keys=4) as rec, torch.no_grad():
        model(ids)
    behind, first = key_distance(12, 12).double(), first_window(12, 2)  # no padding: keys 0 and 1
    recent = ((behind >= 0) & (behind < 4)).double()  # the last 4 keys of each row
    for name in ALL:
        if name == "sink_mass" and not rec.has_sinks:
            assert rec.mean(name) is None
            continue
        if name == MAX_LOGIT.name:  # of the scores, which eager's probabilities do not give back (its
            # definition is held to every kernel at every shape above): recorded, finite
            assert np.isfinite(rec.mean(name)).all()
            continue
        want = []
        for (
            p
        ) in probs:  # a sink's share is what the probabilities leave of 1 (eager's softmax rounds in fp32)
            sink = (
                (1.0 - p.sum(-1)).clamp_min(0.0) if rec.has_sinks else torch.zeros(p.shape[:3], dtype=p.dtype)
            )
            visible = torch.ones(p.shape[:3], dtype=torch.bool)
            want.append(DEFINITIONS[name](RowContext(p, sink, visible, behind, first, recent)))
        np.testing.assert_allclose(
            rec.mean(name), mean_by_position(want, None), atol=tol, rtol=1e-5, err_msg=name
        )


def test_each_statistic_is_declared_once_and_every_table_derives_from_it():
    """The kernels' reads and the float64 definitions are registered under the declared names, in the
    declaration's order, and take unit, description and `squared` from it; the plot labels and the results'
    arrays derive from it; entropy_lens.results and the declarations read without importing torch."""
    from entropy_lens.kernels.reference import DEFINITIONS
    from entropy_lens.plotting import STAT_NAMES
    from entropy_lens.results import ARRAYS

    assert tuple(ROW_STATS) == tuple(DEFINITIONS) == tuple(STATISTICS)
    for name, stat in ROW_STATS.items():
        assert stat.spec is STATISTICS[name]
        assert (stat.unit, stat.description, stat.squared) == (
            STATISTICS[name].unit,
            STATISTICS[name].description,
            STATISTICS[name].squared,
        )
        assert (
            STAT_NAMES[name] == STATISTICS[name].label and STATISTICS[name].reduction in REDUCTIONS.values()
        )
    assert ARRAYS[:2] == ENTROPY.sums == (ENTROPY.name, ENTROPY.name + "_sq")
    code = "import sys, entropy_lens.results, entropy_lens.statistics; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("lacks", ["kernels.stats", "kernels.reference"])
def test_a_declared_statistic_without_its_read_or_definition_fails_the_import(lacks):
    """A statistic declared in entropy_lens.statistics with no `@read` (kernels/stats.py) or no
    `@definition` (kernels/reference.py) fails the import of the kernels, naming it; registering a name
    that is not declared fails too."""
    which = {
        "kernels.stats": "kernels/stats.py reads",
        "kernels.reference": "kernels/reference.py definitions",
    }
    code = (
        "import importlib, entropy_lens.kernels, entropy_lens.statistics as s; "
        "s.STATISTICS['fading'] = s.Statistic('fading', 'nats', 'a test statistic', 'fading'); "
        f"importlib.reload(importlib.import_module('entropy_lens.{lacks}'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and f"{which[lacks]}: no entry for fading" in done.stderr, done.stderr[-2000:]
    with pytest.raises(ValueError, match="undeclared fading"):
        check_registered({**dict.fromkeys(STATISTICS), "fading": None}, "reads")
    with pytest.raises(ValueError, match="not declared"):
        read("fading")(lambda state, mods: state["l"])


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
    extra = set(ALL) - {"entropy", "sink_mass"}  # --stats all: every row statistic and every key statistic
    assert (
        set(mean.stats) == {key for name in (*extra, *KEY_STATISTICS) for key in declared(name).sums}
        and mean.stats["distance"].shape[1] == 1
        and mean.received().shape == mean.stats["distance"].shape
    )
    assert plain.stats == {} and "stats" not in plain.meta and plain.meta["scan_config"]["stats"] == "entropy"
    assert ((got.stats["first_mass"] > 0) & (got.stats["first_mass"] <= 1 + 1e-6)).all()
    # the schema went up with the statistics; a file without them is written as version 1 (issue 48: a
    # reader of version 1 opens it), and a file of version 1 (entropy alone) loads unchanged
    assert got.meta["schema_version"] == 2 and plain.meta["schema_version"] == 1
    assert mean.meta["schema_version"] == SCHEMA_VERSION == 3  # the key statistics' version
    old = ScanResult(**{k: getattr(plain, k) for k in ARRAYS}, meta={**plain.meta, "schema_version": 1})
    again = ScanResult.load(old.save(tmp_path / "v1.npz"))
    assert again.meta == old.meta and all(
        np.array_equal(getattr(again, k), getattr(plain, k)) for k in ARRAYS
    )
    newer = ScanResult(**{k: getattr(plain, k) for k in ARRAYS}, meta={**plain.meta, "schema_version": 4})
    with pytest.raises(EntropyLensError, match="has schema_version 4, this entropy-lens reads 1, 2, 3"):
        ScanResult.load(newer.save(tmp_path / "v4.npz"))
    with pytest.raises(EntropyLensError, match="--stats: unknown statistic"):
        ScanConfig(**base, stats="max_prob,fading").check()
    with pytest.raises(EntropyLensError, match="needs --record heads or mean, not none"):
        ScanConfig(**base, stats="all", entropy="none").check()


def test_a_scan_records_recent_mass_with_its_window_in_the_meta(tmp_path):
    """scan --stats recent_mass --recent-keys W: the meta records W as it records first_keys, the summary
    names it; with W = 4 the first 4 positions put all their mass on their last 4 keys (no sink), later
    ones less than all; with W at least the length every row's mass is on its last W keys. W joins the
    cache key only away from its default (64)."""
    from architectures import SUPPORTED, save_folder

    from entropy_lens.results import ScanResult, summary
    from entropy_lens.runs.scan import ScanConfig, scan

    folder = save_folder(tmp_path, "llama", SUPPORTED["llama"][0])
    base = {"model": str(folder), "length": 16, "samples": 2, "data": "austen:persuasion", "dtype": "float32"}
    for W in (4, 16):
        scan(
            ScanConfig(**base, stats=RECENT_MASS.name, recent_keys=W),
            out=tmp_path / f"{W}.npz",
            progress=False,
        )
    narrow, whole = (ScanResult.load(tmp_path / f"{W}.npz") for W in (4, 16))
    assert set(narrow.stats) == {RECENT_MASS.name, RECENT_MASS.name + "_sq"}
    assert (
        narrow.meta["recent_keys"] == 4 and whole.meta["recent_keys"] == 16 and narrow.meta["first_keys"] == 1
    )
    assert narrow.meta["stats"] == {"entropy": "nats", RECENT_MASS.name: "probability"}
    got = narrow.stats[RECENT_MASS.name]  # (layers, heads, positions)
    assert np.allclose(got[..., :4], 1.0, atol=1e-5) and got[..., 4:].mean() < 0.9
    assert ((got > 0) & (got <= 1 + 1e-6)).all()
    assert np.allclose(whole.stats[RECENT_MASS.name], 1.0, atol=1e-5)
    assert summary(narrow).splitlines()[-1].endswith("W = 4 keys")
    assert "recent_keys" not in ScanConfig(**base).cache_key()
    assert ScanConfig(**base, recent_keys=4).cache_key()["recent_keys"] == 4


PACKAGE = Path(__file__).parents[2] / "entropy_lens"
# Where a statistic's name may be written as a string: its declaration (the first argument of
# `Statistic(...)`), its read (`@read(...)`) and its float64 definition (`@definition(...)`), each the
# call's first argument in that one module, and the figures that draw it (anywhere under figures/ and
# plotting/). Everything else takes the name from the declaration (`ENTROPY.name`).
REGISTERED = {
    "statistics/__init__.py": "Statistic",
    "kernels/stats.py": "read",
    "kernels/reference.py": "definition",
}
FIGURES = ("figures/", "plotting/")
# The same word with another meaning: ScanConfig's field `entropy` (--entropy heads|mean|none, how the
# statistics are reduced over heads), named as a field, not as the statistic; (module, word): how often
OTHER_MEANING = {
    ("cli/scan.py", "entropy"): 4,
    ("runs/configs.py", "entropy"): 1,
    ("runs/sweep.py", "entropy"): 2,
    ("analysis/sweep.py", "entropy"): 1,
}


def statistic_names_written(rel: str, source: str) -> list[tuple[str, int, bool]]:
    """(name, line, registered) for each string constant in the module `rel` (its `source`) equal to a
    declared statistic's name; registered: the first argument of a call to the function REGISTERED names
    for the module."""
    tree = ast.parse(source)
    allowed, inside = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if func is not None and func == REGISTERED.get(rel):
                allowed.add(id(node.args[0]))
                if func == "Statistic":  # the declaration's other words (varentropy's label is its name)
                    inside |= {id(a) for a in node.args[1:]}
    return [
        (node.value, node.lineno, id(node) in allowed)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STATISTICS
        if id(node) not in inside
    ]


def test_a_statistic_is_named_only_where_it_is_declared_read_defined_or_drawn():
    """The name of each statistic, as a string in the package's code, appears only in its declaration,
    its read, its definition and a figure that draws it; and each is written in all of the first three,
    once each."""
    strays, other, registered = [], {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for name, line, ok in statistic_names_written(rel, path.read_text(encoding="utf-8")):
            if ok:
                registered[rel, name] = registered.get((rel, name), 0) + 1
            elif (rel, name) in OTHER_MEANING:
                other[rel, name] = other.get((rel, name), 0) + 1
            elif not rel.startswith(FIGURES):
                strays.append(f"{rel}:{line} {name!r}")
    assert not strays, "take these from entropy_lens.statistics (e.g. ENTROPY.name): " + ", ".join(strays)
    assert other == OTHER_MEANING
    assert registered == {(rel, name): 1 for rel in REGISTERED for name in STATISTICS}


def test_the_name_check_sees_what_it_must():
    """The parser tells a registration from any other use (else the test above would pass on anything)."""
    code = (PACKAGE / "kernels" / "stats.py").read_text(encoding="utf-8") + "\nstray = {'entropy': 1}\n"
    found = [(n, ok) for n, _, ok in statistic_names_written("kernels/stats.py", code) if n == ENTROPY.name]
    assert found == [(ENTROPY.name, True), (ENTROPY.name, False)] or sorted(found) == [
        (ENTROPY.name, False),
        (ENTROPY.name, True),
    ]
    assert statistic_names_written("runs/scan.py", "read('entropy')") == [(ENTROPY.name, 1, False)]


def test_a_maximum_is_kept_as_the_largest_row_not_summed():
    """max_logit's reduction is a maximum (statistics.MAX): the host keeps, per position, the largest
    value of any row (padded rows left out, each row at its true position) across batches and forwards,
    drains it into a caller's maxima, and a scan's result stores it undivided by the row count, its head
    reduction the largest head; the sums beside it (entropy) stay sums and means."""
    from entropy_lens.capture.accumulate import HostSums
    from entropy_lens.runs.sums import ScanSums
    from entropy_lens.statistics import MAX, reduction_of

    assert {name for name in STATISTICS if reduction_of(name) is MAX} == {MAX_LOGIT.name}
    host = HostSums(1, 2)
    host.begin_forward(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]).bool())  # row 0 of batch 0 is padding
    v = torch.tensor([[[50.0, 1, 2, 3], [1, 1, 1, 1]], [[0.5, 7, -1, 2], [2, 2, 2, 2]]])  # (B, H, T)
    host.add(0, {ENTROPY.name: v, MAX_LOGIT.name: v}, 0)
    host.begin_forward(None)
    host.add(0, {ENTROPY.name: v[:1] - 10, MAX_LOGIT.name: v[:1] - 10}, 0)  # lower: changes no maximum
    got = host.read()
    assert np.array_equal(got[MAX_LOGIT.name][0], [[40.0, 7, 3, 2], [2, 2, 2, 2]])  # 50 − 10 at position 0
    assert np.array_equal(got["count"], [3, 3, 3, 2]) and got[ENTROPY.name][0, 0, 0] == 1 + 0.5 + 40
    sums = ScanSums(1, 2, 4, stats=(MAX_LOGIT.name,))
    assert (sums.arrays[MAX_LOGIT.name] == float("-inf")).all() and MAX_LOGIT.name + "_sq" not in sums.arrays
    sums.arrays |= {k: v.copy() for k, v in got.items() if k in sums.arrays}
    sums.arrays["loss"] = np.ones(4)
    heads, mean = sums.result({}, "heads"), sums.result({}, "mean")
    assert np.array_equal(heads.stats[MAX_LOGIT.name], got[MAX_LOGIT.name])  # not divided by the count
    assert np.array_equal(mean.stats[MAX_LOGIT.name], got[MAX_LOGIT.name].max(axis=1, keepdims=True))
    assert np.allclose(heads.entropy, got[ENTROPY.name] / got["count"])
    into = {k: torch.full((1, 2, 4), reduction_of(k).identity, dtype=torch.float64) for k in got}
    into["count"] = torch.zeros(4, dtype=torch.int64)
    host.begin_forward(None)
    host.add(0, {ENTROPY.name: v[1:], MAX_LOGIT.name: v[1:] + 100}, 0)
    host.drain_into(into)
    assert np.array_equal(into[MAX_LOGIT.name][0].numpy(), [[100.5, 107, 99, 102], [102, 102, 102, 102]])


def test_a_padded_batch_records_the_largest_max_logit_of_its_rows():
    """Through the capture: the max logit a left-padded batch records at each position is the larger of
    the two sequences' own, each recorded alone (padded rows left out, rows at their true positions),
    and a statistic of means beside it is their mean."""
    from tiny import make_tiny_model

    from entropy_lens.capture import EntropyRecorder

    model = make_tiny_model().eval()
    long = torch.randint(3, 300, (1, 10), generator=torch.Generator().manual_seed(1))
    short = torch.randint(3, 300, (1, 7), generator=torch.Generator().manual_seed(2))
    stats = (ENTROPY.name, MAX_LOGIT.name)
    alone = []
    for ids in (long, short):
        with EntropyRecorder(model, stats=stats) as rec, torch.no_grad():
            model(ids)
        alone.append({name: rec.mean(name) for name in stats})
    ids = torch.cat([long, torch.cat([torch.ones(1, 3, dtype=torch.long), short], 1)])
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, :3] = 0
    with EntropyRecorder(model, stats=stats) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    top = alone[0][MAX_LOGIT.name].copy()
    top[..., :7] = np.maximum(top[..., :7], alone[1][MAX_LOGIT.name])
    np.testing.assert_allclose(rec.mean(MAX_LOGIT.name), top, rtol=1e-5, atol=1e-5)
    mean = alone[0][ENTROPY.name].copy()
    mean[..., :7] = (mean[..., :7] + alone[1][ENTROPY.name]) / 2
    np.testing.assert_allclose(rec.mean(ENTROPY.name), mean, rtol=1e-5, atol=1e-5)


def test_a_misspelt_statistic_is_answered_with_the_closest_name_wherever_stats_is_given():
    """--stats, EntropyRecorder(stats=), attention_stats(stats=) and AttentionMonitor(stats=) read names
    through one parser: a misspelt name is refused with the declared one closest to it, and `all` beside
    other names is refused as that, not as an unknown statistic."""
    from tiny import make_tiny_model

    from entropy_lens import AttentionMonitor, EntropyRecorder
    from entropy_lens.flags import parse_stats
    from entropy_lens.runs.configs import ScanConfig
    from entropy_lens.statistics import MAX_PROB

    # --stats and a recorder take both axes' names: the hint and the choices name both (issue 65)
    hint = r"unknown statistic \['max_probability'\] \(did you mean max_prob\?\); choose all, row statistics from entropy"
    base = {"model": "tiny-rope", "length": 16, "samples": 1}
    with pytest.raises(EntropyLensError, match="--stats: " + hint) as refused:
        ScanConfig(**base, stats="entropy,max_probability").check()
    assert "\n" not in str(refused.value)
    with pytest.raises(EntropyLensError, match=r"--stats: `all` cannot be combined with other statistics"):
        ScanConfig(**base, stats="all,foo").check()
    model = make_tiny_model()
    with pytest.raises(ValueError, match=hint):
        EntropyRecorder(model, stats=("entropy", "max_probability"))
    q, k = make_inputs(1, 4, 2, 8, 8)
    with pytest.raises(ValueError, match=r"\['Max'\] \(did you mean max_prob or max_logit\?\)"):
        attention_stats(q, k, softmax_scale=0.3, stats=("Max",))
    with pytest.raises(
        EntropyLensError, match=r"unknown statistic 'max_probabilty' \(did you mean max_prob\?\)"
    ):
        AttentionMonitor(model, stats=("entropy", "max_probabilty"))
    with pytest.raises(ValueError, match=r"unknown row statistic \['fading'\]; choose"):  # nothing close
        parse_stats("fading")
    assert parse_stats("all") == ALL and parse_stats(f"{ENTROPY.name},{MAX_PROB.name}") == (
        ENTROPY.name,
        MAX_PROB.name,
    )


def test_a_reduction_combines_alike_in_numpy_and_torch():
    """statistics.Reduction (issue 58): one declaration says how values combine; numpy arrays and torch
    tensors give the same numbers, padded entries (keep False) count as the identity, a finished value
    is NaN where no row was seen, and every statistic names one of the declared reductions and axes."""
    from entropy_lens.statistics import AXES, MAX, MEAN

    values = np.array([[1.0, -3.0, 2.0], [4.0, 0.5, -1.0]])
    keep = np.array([[True, False, True], [True, True, False]])
    count = np.array([2, 0, 1])
    for reduction, reduced, finished in (
        (MEAN, [3.0, 4.5], [0.5, np.nan, 2.0]),
        (MAX, [2.0, 4.0], [1.0, np.nan, 2.0]),
    ):
        for lib in (np.asarray, torch.as_tensor):
            got = reduction.reduce(lib(values), 1, lib(keep))
            assert np.allclose(np.asarray(got), reduced)
            done = reduction.finish(lib(values[0]), lib(count))
            assert np.allclose(np.asarray(done), finished, equal_nan=True)
            assert np.allclose(
                np.asarray(reduction.combine(lib(values[0]), lib(values[1]))),
                (values[0] + values[1] if reduction is MEAN else np.maximum(values[0], values[1])),
            )
        assert (
            reduction.summarize(values, 1).tolist()
            == (values.mean(1) if reduction is MEAN else values.max(1)).tolist()
        )
    assert all(s.reduction in (MEAN, MAX) and s.axis in AXES for s in STATISTICS.values())
