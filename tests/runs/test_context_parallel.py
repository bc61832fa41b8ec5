"""`--context-parallel`: each sequence sharded over torchrun's processes (capture/context_parallel.py,
runs/context_parallel.py) equals the one-process scan to float rounding, over the model kinds the scan
takes: NoPE, RoPE with GQA, ALiBi (BLOOM), a sliding-window layer, sinks (gpt-oss), per-head scales and a
schedule, both attention paths, loss-only scans; with 2 and 3 gloo processes (3: uneven chunks) at
lengths that 2P does not divide, and 4 processes as 2 groups of 2 (--context-parallel 2: the groups split
the samples); a rank (or a group) without a sample still sums every statistic (issue 48). Plus the
layout, the flag and the one-line refusals. The launches are few (torch's start-up in every process is
most of their time): one per number of processes, running every case and command of that size
(tests/context_parallel_scans.py)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from entropy_lens.capture.shards import SequenceShards
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult

COMMON = {"samples": 3, "batch_size": 2, "data": "austen:persuasion", "length": 50}
# name -> (model: a bundled name or a folder the fixture makes, ScanConfig fields)
CASES = {
    "nope": ("tiny-nope", {"stats": "all", "fused": "off"}),
    "nope-one-pass": ("tiny-nope", {"fused": "on", "length": 61}),
    "nope-loss-only": ("tiny-nope", {"entropy": "none"}),
    "rope-gqa-head-scales": ("gqa", {"fused": "off", "head_scales": "head_scales.npy"}),
    "rope-gqa-schedule": ("gqa", {"fused": "on", "scale": 1.3, "scale_schedule": "log:0.5", "train_len": 16}),
    "alibi": ("tiny-alibi", {"stats": "all", "fused": "off"}),
    "alibi-one-pass": ("tiny-alibi", {"fused": "on", "entropy": "mean"}),
    "sliding-window": ("qwen2-window", {"fused": "off", "stats": "distance,first_mass", "first_keys": 3}),
    "sinks": ("gpt_oss", {"stats": "all", "fused": "off"}),
}
# a single sample: with 2 ranks (or 2 groups) one of them has none (test_a_rank_without_samples_...)
EMPTY = {"length": 32, "samples": 1, "data": "austen:northanger", "stats": "all", "fused": "off"}
OTHER_CASES = {
    "empty-rank": ("gqa", {**EMPTY, "context_parallel": False}),  # data-parallel: rank 1 has no sample
    "empty-rank-groups": ("gqa", EMPTY),  # the launch's --context-parallel 2: group 1 has no sample
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _models(folder: Path) -> dict[str, str]:
    """The folders the cases name, made here (tiny random models: tests/tiny.py, tests/architectures.py)."""
    import torch
    from architectures import COMMON as ARCH
    from architectures import save_folder
    from tiny import make_tiny_dir, make_tiny_sliding_window_model, make_tokenizer

    gqa = make_tiny_dir(folder / "gqa")  # Llama, RoPE, 4 query heads over 2 KV heads
    window = folder / "qwen2-window"  # a full layer and a sliding layer of 8 keys
    make_tiny_sliding_window_model(window=8).save_pretrained(window)
    make_tokenizer().save_pretrained(window)
    sinks = save_folder(
        folder,
        "gpt_oss",
        {"head_dim": 8, "num_local_experts": 2, "num_experts_per_tok": 1, "sliding_window": 4},
    )
    torch.manual_seed(1)
    np.save(folder / "head_scales.npy", (0.6 + torch.rand(2, 4)).numpy())  # gqa: 2 layers x 4 heads
    assert ARCH["num_attention_heads"] == 4
    return {"gqa": str(gqa), "qwen2-window": str(window), "gpt_oss": str(sinks)}


def _config(name: str, folder: Path, models: dict[str, str]) -> dict:
    model, fields = {**CASES, **OTHER_CASES}[name]
    fields = dict(fields)
    if "head_scales" in fields:
        fields["head_scales"] = str(folder / fields["head_scales"])
    return {**COMMON, "model": models.get(model, model), **fields}


def _torchrun(processes: int, script_args: list[str], *, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(processes),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        *script_args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("context_parallel")
    return folder, _models(folder)


def _launch(
    folder: Path, models: dict, names, processes: int, tag: str, commands=(), **fields
) -> tuple[dict[str, ScanResult], str]:
    """({case: its result}, the launch's stdout) of one torchrun launch of `processes` scanning `names`
    (ScanConfig `fields` added to each case), then running the CLI `commands` (argv lists) in the same
    process group."""
    cases = [
        {"config": {**_config(name, folder, models), **fields}, "out": str(folder / f"{name}-{tag}.npz")}
        for name in names
    ]
    cases += [{"argv": list(argv)} for argv in commands]
    listing = folder / f"cases-{tag}.json"
    listing.write_text(json.dumps(cases), encoding="utf-8")
    run = _torchrun(processes, [str(Path(__file__).parents[1] / "context_parallel_scans.py"), str(listing)])
    assert run.returncode == 0, run.stderr[-4000:]
    return {name: ScanResult.load(folder / f"{name}-{tag}.npz") for name in names}, run.stdout


@pytest.fixture(scope="module")
def one_process(made):
    """{case: the one-process scan}, made once for every launch that is compared with it."""
    from entropy_lens.runs.scan import ScanConfig, scan

    folder, models = made
    cache = {}

    def get(name: str) -> ScanResult:
        if name not in cache:
            config = ScanConfig(**_config(name, folder, models))
            cache[name] = scan(config, out=folder / f"{name}-1.npz", progress=False)
        return cache[name]

    return get


# The CLI commands run in the launches (sweep and ppl under --context-parallel), each compared with the
# same command in one process; their outputs go to the module's folder
SWEEP = ["sweep", "tiny-nope", "--len", "26", "--samples", "2", "--data", "austen:persuasion"]
SWEEP += ["--scales", "1.0,1.5", "--fused", "off", "--quiet"]
PPL = ["ppl", "tiny-nope", "--lens", "24", "40", "--stride", "8", "--samples", "3", "--quiet"]
SCAN = ["scan", "tiny-nope", "--len", "37", "--samples", "2", "--data", "austen:persuasion", "--fused", "off"]
SCAN += ["--quiet"]
GROUP_CASES = ("nope", "rope-gqa-head-scales")
# a rank without samples: 1 sample over 2 ranks (data-parallel), or over 2 groups of 2 shards
EMPTY_RANK = {"2 ranks": ("empty-rank", 2), "2 groups of 2": ("empty-rank-groups", 4)}


def _commands(folder: Path, processes: int) -> list[list[str]]:
    """The CLI commands of the launch of `processes` (tag = processes)."""
    if processes == 2:
        return [
            [*SCAN, "--context-parallel", "--out", str(folder / "scan-two.npz")],
            [*SWEEP, "--context-parallel", "--out", str(folder / "sweep-two")],
            [*PPL, "--context-parallel", "--out", str(folder / "ppl-two.json")],
        ]
    if processes == 4:
        return [[*PPL, "--context-parallel", "2", "--out", str(folder / "ppl-four.json")]]
    return []


@pytest.fixture(scope="module")
def launches(made):
    """get(P) -> ({case: result}, stdout) of this file's one torchrun launch of P processes, made once:
    P = 2 and 3 shard every case of CASES over all P; P = 2 also scans a sample over 2 ranks
    data-parallel and runs SCAN, SWEEP and PPL --context-parallel; P = 4 runs GROUP_CASES, a sample over
    2 groups of 2, and PPL --context-parallel 2 (--context-parallel 2: 2 groups of 2 shards, the groups
    splitting the samples)."""
    folder, models = made
    cache = {}

    def get(processes: int):
        if processes not in cache:
            names = {2: [*CASES, "empty-rank"], 3: list(CASES), 4: [*GROUP_CASES, "empty-rank-groups"]}
            fields = {"context_parallel": 2} if processes == 4 else {}
            cache[processes] = _launch(
                folder,
                models,
                names[processes],
                processes,
                str(processes),
                _commands(folder, processes),
                **fields,
            )
        return cache[processes]

    return get


@pytest.fixture(scope="module")
def scans(launches, one_process):
    """{(case, P): (one-process result, P-process --context-parallel result)} for P = 2 and 3: the
    one-process scans here, the sharded ones in one torchrun launch per P."""
    found = {}
    for processes in (2, 3):
        for name in CASES:
            found[name, processes] = (one_process(name), launches(processes)[0][name])
    return found


@pytest.fixture(scope="module")
def group_scans(launches, one_process):
    """{case: (one-process result, 4-process --context-parallel 2 result)}: 2 groups of 2 shards, the
    groups splitting the 3 samples (group 0 a batch of 2, group 1 one sample), in one launch."""
    found = launches(4)[0]
    return {name: (one_process(name), found[name]) for name in GROUP_CASES}


@pytest.fixture(scope="module")
def one_process_ppl(made):
    """PPL in one process, the table both ppl launches are compared with."""
    from entropy_lens.cli import main

    out = made[0] / "ppl-one.json"
    assert main([*PPL, "--out", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def _wrote_once(stdout: str, out: Path) -> bool:
    """Rank 0 alone wrote `out` and said so (one "wrote" line naming it in the launch's output)."""
    return sum(line.startswith("wrote") and str(out) in line for line in stdout.splitlines()) == 1


def _assert_equal_scans(sharded: ScanResult, one: ScanResult) -> None:
    """The same numbers to float rounding, the same samples and positions, the same routes."""
    assert sharded.meta["samples"] == one.meta["samples"] == COMMON["samples"]
    assert sharded.meta["attention_path"] == one.meta["attention_path"]  # the same routes ran
    np.testing.assert_array_equal(sharded.count, one.count)
    for key in ("entropy", "entropy_sq", "loss", "loss_sq"):
        np.testing.assert_allclose(
            getattr(sharded, key), getattr(one, key), rtol=1e-5, atol=1e-5, err_msg=key
        )
    assert set(sharded.stats) == set(one.stats)
    for key, values in one.stats.items():
        np.testing.assert_allclose(sharded.stats[key], values, rtol=1e-5, atol=1e-5, err_msg=key)


@pytest.mark.slow
@pytest.mark.xdist_group("context-parallel")  # one worker makes the models and one-process scans
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("name", list(CASES))
def test_sharded_scan_equals_the_one_process_scan(scans, name, processes):
    one, sharded = scans[name, processes]
    assert sharded.meta["context_parallel"] == sharded.meta["world_size"] == processes
    assert one.meta["context_parallel"] == one.meta["world_size"] == 1
    _assert_equal_scans(sharded, one)
    if CASES[name][1].get("stats") == "all":
        assert {"max_prob", "varentropy", "distance", "first_mass"} <= set(one.stats)
    if name == "sinks":
        assert "sink_mass" in one.stats


@pytest.mark.slow
@pytest.mark.xdist_group("context-parallel")  # one worker makes the models and one-process scans
@pytest.mark.parametrize("name", GROUP_CASES)
def test_groups_of_shards_equal_the_one_process_scan(group_scans, name):
    """torchrun --nproc-per-node 4 ... --context-parallel 2: each sequence over 2 ranks, 2 groups."""
    one, sharded = group_scans[name]
    assert (sharded.meta["context_parallel"], sharded.meta["world_size"]) == (2, 4)
    assert sharded.meta["scan_config"]["context_parallel"] == 2
    _assert_equal_scans(sharded, one)


@pytest.mark.slow
@pytest.mark.xdist_group("context-parallel")  # the launch of 2 processes is made once, on one worker
def test_the_cli_under_torchrun(launches, made, tmp_path):
    """`scan ... --context-parallel` as the CLI runs it under torchrun (entropy_lens.cli.main in the
    2-process launch, as `torchrun -m entropy_lens scan` calls it): rank 0 alone writes and reports, the
    meta says how many shards. (`torchrun -m entropy_lens scan` itself, the scan making its own process
    group, is tests/runs/test_distributed.py's; the ranks of test_reliability_runs.py run
    `python -m entropy_lens scan --context-parallel`.)"""
    from entropy_lens.cli import main

    assert main([*SCAN, "--out", str(tmp_path / "one.npz")]) == 0
    _, stdout = launches(2)
    assert _wrote_once(stdout, made[0] / "scan-two.npz")  # rank 0 alone writes and reports
    one, two = ScanResult.load(tmp_path / "one.npz"), ScanResult.load(made[0] / "scan-two.npz")
    assert two.meta["context_parallel"] == 2 and two.meta["scan_config"]["context_parallel"] is True
    assert one.meta["scan_config"]["context_parallel"] is False  # every field recorded (cache_key: not a key)
    np.testing.assert_allclose(two.entropy, one.entropy, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(two.loss, one.loss, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("processes", "length"), [(2, 4), (2, 9), (3, 6), (3, 50), (4, 61), (8, 1000)])
def test_the_layout_covers_every_position_once_and_balances_the_work(processes, length):
    shards = [SequenceShards(r, processes, length) for r in range(processes)]
    positions = np.concatenate([s.positions().numpy() for s in shards])
    np.testing.assert_array_equal(np.sort(positions), np.arange(length))
    for s in shards:
        (a0, b0), (a1, b1) = s.chunks
        assert a0 < b0 <= a1 < b1  # one early chunk, one late one, in position order
        assert s.lengths == [t.local_length() for t in shards]
    work = [sum(b * (b + 1) // 2 - a * (a + 1) // 2 for a, b in s.chunks) for s in shards]  # scores per rank
    assert max(work) / min(work) < 1 + 4 * processes / length + 1e-9


def test_refused_outside_torchrun(monkeypatch, capsys):
    from entropy_lens.cli import main

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["scan", "tiny-nope", "--len", "16", "--samples", "1", "--context-parallel", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "torchrun --nproc-per-node P" in err


def _as_rank_0_of(monkeypatch, processes: int) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(processes))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")


def test_a_length_shorter_than_two_chunks_per_process_is_refused(monkeypatch, tmp_path):
    from entropy_lens.runs.scan import ScanConfig, scan

    _as_rank_0_of(monkeypatch, 4)
    config = ScanConfig(model="tiny-nope", length=7, samples=1, context_parallel=True)
    with pytest.raises(
        EntropyLensError, match=r"--len 7 is shorter than the 8 chunks .* pass --len 8 or more"
    ):
        scan(config, out=tmp_path / "x.npz", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_resume_is_refused_under_torchrun(monkeypatch, tmp_path):
    from entropy_lens.runs.scan import ScanConfig, scan

    _as_rank_0_of(monkeypatch, 2)
    config = ScanConfig(model="tiny-nope", length=16, samples=1, context_parallel=True)
    with pytest.raises(EntropyLensError, match="--resume is not supported under torchrun"):
        scan(config, out=tmp_path / "x.npz", resume=True, progress=False)


def test_falcons_per_key_alibi_is_refused_naming_the_family(monkeypatch, tmp_path):
    from architectures import SUPPORTED, save_folder

    from entropy_lens.runs.scan import ScanConfig, scan

    folder = save_folder(tmp_path, "falcon (alibi=True)", SUPPORTED["falcon (alibi=True)"][0])
    _as_rank_0_of(monkeypatch, 2)
    config = ScanConfig(
        model=str(folder), length=16, samples=1, data="austen:persuasion", context_parallel=True
    )
    with pytest.raises(
        EntropyLensError, match=r"cannot shard FalconForCausalLM \(Falcon with alibi=True\)"
    ) as err:
        scan(config, out=tmp_path / "x.npz", progress=False)
    assert "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.xdist_group("context-parallel")  # the launch of 2 processes is made once, on one worker
def test_sweep_and_ppl_shard_their_scans_under_torchrun(launches, one_process_ppl, made, tmp_path):
    """`sweep` and `ppl` take --context-parallel under torchrun: rank 0 keeps the folder / writes the
    table, every rank scans every scale / length, and the numbers are the one-process command's. (Both
    commands run through entropy_lens.cli.main in the 2-process launch, context_parallel_scans.py; the
    command as a user types it, `torchrun -m entropy_lens`, is tests/runs/test_distributed.py's.)"""
    from entropy_lens.cli import main
    from entropy_lens.results import read_sweep_index

    folder = made[0]
    assert main([*SWEEP, "--out", str(tmp_path / "one")]) == 0
    _, stdout = launches(2)
    for out in (folder / "sweep-two", folder / "ppl-two.json"):
        assert _wrote_once(stdout, out)  # rank 0 alone writes and reports
    assert read_sweep_index(folder / "sweep-two")["complete"]
    for name in ("s1.npz", "s1.5.npz"):
        one, two = ScanResult.load(tmp_path / "one" / name), ScanResult.load(folder / "sweep-two" / name)
        assert two.meta["context_parallel"] == 2
        np.testing.assert_allclose(two.entropy, one.entropy, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(two.loss, one.loss, rtol=1e-5, atol=1e-5)
    one, two = one_process_ppl, json.loads((folder / "ppl-two.json").read_text(encoding="utf-8"))
    assert two["config"]["context_parallel"] is True
    for a, b in zip(one["lengths"], two["lengths"], strict=True):
        assert a["n_tokens"] == b["n_tokens"]
        assert b["nll"] == pytest.approx(a["nll"], rel=1e-5)


@pytest.mark.slow
@pytest.mark.xdist_group("context-parallel")  # the launches are made once, on one worker
@pytest.mark.parametrize("case", list(EMPTY_RANK))
def test_a_rank_without_samples_still_sums_every_statistic(launches, one_process, case):
    """One sample over 2 ranks (data-parallel), or over 2 groups of 2 shards: the rank (the group) without
    a sample still takes part in every sum, of every statistic."""
    name, processes = EMPTY_RANK[case]
    one, many = one_process("empty-rank"), launches(processes)[0][name]
    assert many.meta["world_size"] == processes and one.stats.keys() == many.stats.keys()
    assert one.meta["samples"] == many.meta["samples"] == 1
    np.testing.assert_array_equal(one.count, many.count)
    for key in ("entropy", "loss"):
        np.testing.assert_allclose(getattr(many, key), getattr(one, key), rtol=1e-5, atol=1e-6)
    for key, values in one.stats.items():
        np.testing.assert_allclose(many.stats[key], values, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("size", "degree"), [(1, 1), (4, 1), (4, 2), (4, 4), (6, 2), (6, 3)])
def test_groups_scan_every_sample_once_over_consecutive_ranks(size, degree):
    """Sample k goes to group k mod W/C, all C of its consecutive ranks, one shard each, one counting it."""
    from entropy_lens.runs.distributed import RankGroups, World

    ranks = [RankGroups(World(r, size), degree) for r in range(size)]
    for k in range(11):
        holders = [g for g in ranks if k in g.samples(0, 11)]
        group = k % (size // degree)
        assert (
            [g.world.rank for g in holders]
            == ranks[0].ranks(group)
            == list(range(group * degree, (group + 1) * degree))
        )
        assert [g.shard for g in holders] == list(range(degree))
        assert [g.first for g in holders] == [True] + [False] * (degree - 1)


SUBCOMMANDS = {
    "scan": ["scan", "tiny-nope", "--len", "16"],
    "sweep": ["sweep", "tiny-nope", "--len", "16", "--scales", "1.0", "--out", "x"],
    "ppl": ["ppl", "tiny-nope", "--lens", "16", "32"],
}


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_the_flag_alone_shards_over_every_rank_and_with_c_over_groups_of_c(command):
    from entropy_lens.cli import build_parser

    args = SUBCOMMANDS[command]
    parse = build_parser().parse_args
    assert parse(args).context_parallel is False
    assert parse([*args, "--context-parallel"]).context_parallel is True
    assert parse([*args, "--context-parallel", "2"]).context_parallel == 2
    assert parse([*args, "--context-parallel", "4", "--samples", "2"]).context_parallel == 4


@pytest.mark.parametrize("value", ["1", "0"])
def test_fewer_than_two_shards_is_refused_in_one_line(value, capsys):
    from entropy_lens.cli import main
    from entropy_lens.runs.scan import ScanConfig

    assert main([*SUBCOMMANDS["scan"], "--context-parallel", value, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(
        rf"--context-parallel must be at least 2 .*\(got {value}\); pass --context-parallel 2 ", err
    )
    with pytest.raises(EntropyLensError, match="--context-parallel must be at least 2"):
        ScanConfig(model="tiny-nope", length=16, context_parallel=int(value))


def test_the_flag_before_the_checkpoint_says_where_it_goes(capsys):
    """`scan --context-parallel CKPT`: argparse reads CKPT as the optional number; the one line says so."""
    from entropy_lens.cli import main

    assert main(["scan", "--context-parallel", "tiny-nope", "--len", "16", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert (
        "--context-parallel takes an optional number, and 'tiny-nope' is none: put --context-parallel after"
        in err
    )


def test_true_in_files_written_before_c_means_every_rank():
    """Old results hold `context_parallel: true` in their scan_config: the same config as the flag alone,
    sharding over all the ranks; C is recorded as C, and the default (off) as False: a file without it
    reads as off."""
    from entropy_lens.runs.context_parallel import shard_groups
    from entropy_lens.runs.distributed import World
    from entropy_lens.runs.output import scan_difference
    from entropy_lens.runs.scan import ScanConfig

    old = {"model": "tiny-nope", "length": 16, "samples": 1, "context_parallel": True}
    config = ScanConfig(**old)
    assert config.to_dict()["context_parallel"] is True
    assert shard_groups(config, World(1, 4)).size == 4 and shard_groups(config, World(1, 4)).count == 1
    assert ScanConfig(**{**old, "context_parallel": 2}).to_dict()["context_parallel"] == 2
    off = ScanConfig(**{**old, "context_parallel": False})
    assert off.to_dict()["context_parallel"] is False
    without = {k: v for k, v in off.to_dict().items() if k != "context_parallel"}  # a file written before it
    assert scan_difference(off.to_dict(), without) is None
    assert scan_difference(config.to_dict(), without) == "--context-parallel (True here, False there)"
    assert shard_groups(ScanConfig(**{**old, "context_parallel": False}), World(1, 4)).size == 1


DIVIDE = "pass --context-parallel 2 or 4 (processes per sequence), or launch torchrun --nproc-per-node 3 or"
REFUSED = {  # (processes, C): what the one line says
    (4, 3): f"--context-parallel 3 does not cut torchrun's 4 processes into groups of 3; {DIVIDE}",
    (
        2,
        4,
    ): "--context-parallel 4 does not cut torchrun's 2 processes into groups of 4; pass --context-parallel 2",
    (1, 2): "torchrun --nproc-per-node P -m entropy_lens ... (P a multiple of 2), or drop --context-parallel",
}


@pytest.mark.parametrize(("processes", "degree"), list(REFUSED))
def test_a_c_that_does_not_divide_the_processes_is_refused(monkeypatch, tmp_path, processes, degree):
    from entropy_lens.runs.scan import ScanConfig, scan

    _as_rank_0_of(monkeypatch, processes)
    config = ScanConfig(model="tiny-nope", length=16, samples=1, context_parallel=degree)
    with pytest.raises(EntropyLensError) as err:
        scan(config, out=tmp_path / "x.npz", progress=False)
    assert REFUSED[processes, degree] in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_length_shorter_than_two_chunks_per_process_of_a_group_is_refused():
    """The shortest length is 2C, not 2W: every length of a ppl is checked before any runs."""
    from entropy_lens.runs.configs import PerplexityConfig
    from entropy_lens.runs.context_parallel import check_context_parallel
    from entropy_lens.runs.distributed import World
    from entropy_lens.runs.scan import ScanConfig

    check_context_parallel(ScanConfig(model="tiny-nope", length=4, context_parallel=2), World(0, 4))
    for config in (
        ScanConfig(model="tiny-nope", length=3, context_parallel=2),
        PerplexityConfig(model="tiny-nope", lengths=(3, 8), stride=1, context_parallel=2),
    ):
        with pytest.raises(
            EntropyLensError, match=r"--len 3 is shorter than the 4 chunks .* pass --len 4 or more"
        ):
            check_context_parallel(config, World(0, 4))


@pytest.mark.slow
@pytest.mark.xdist_group("context-parallel")  # the launch of 4 processes is made once, on one worker
def test_ppl_in_groups_of_shards_under_torchrun(launches, one_process_ppl, made):
    """`ppl --context-parallel 2` on 4 processes: each length's windows split between 2 groups of 2
    shards (the groups made and let go once per length, in the one process group), the one-process table.
    (Through entropy_lens.cli.main in the 4-process launch, context_parallel_scans.py.)"""
    folder = made[0]
    _, stdout = launches(4)
    assert _wrote_once(stdout, folder / "ppl-four.json")
    one, four = one_process_ppl, json.loads((folder / "ppl-four.json").read_text(encoding="utf-8"))
    assert four["config"]["context_parallel"] == 2
    for a, b in zip(one["lengths"], four["lengths"], strict=True):
        assert a["n_tokens"] == b["n_tokens"]
        assert b["nll"] == pytest.approx(a["nll"], rel=1e-5)
