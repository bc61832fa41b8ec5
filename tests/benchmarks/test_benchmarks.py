"""The GPU benchmark without a GPU: its model shape, FLOP count, CPU refusal, and a toy-sized run of every
mode under the Triton interpreter."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bench_children import children_in_process

BENCH = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def scan_gpu(benchmark_script):
    return benchmark_script("scan_gpu")


def test_tinyllama_shape_and_a_small_forward(scan_gpu):
    full = scan_gpu.tinyllama_config()
    assert (full.num_hidden_layers, full.num_attention_heads, full.num_key_value_heads, full.head_dim) == (
        22,
        32,
        4,
        64,
    )
    small = scan_gpu.tinyllama_config(
        num_hidden_layers=1,
        hidden_size=64,
        intermediate_size=96,
        vocab_size=50,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = scan_gpu.build_model(small, "cpu", torch.float32)
    logits = model(torch.randint(0, 50, (1, 12))).logits
    assert logits.shape == (1, 12, 50) and torch.isfinite(logits).all()


def test_flop_count(scan_gpu):
    assert scan_gpu.entropy_flops(2, 4, 8, causal=False) == 2 * 2 * 16 * 8
    assert scan_gpu.entropy_flops(2, 4, 8) == 2 * 2 * 10 * 8  # 4·5/2 visible (query, key) pairs


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on machines without CUDA")
def test_refuses_without_cuda():
    run = subprocess.run(
        [sys.executable, str(BENCH / "scan_gpu.py"), "--lengths", "16"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1 and "needs a CUDA GPU" in run.stderr


def _smoke(tmp_path, *args):
    env = {**os.environ, "TRITON_INTERPRET": "1", "ENTROPY_LENS_BACKEND": "triton", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        str(BENCH / "scan_gpu.py"),
        "--device",
        "cpu",
        "--tiny",
        "--repeats",
        "1",
        "--out",
        str(tmp_path / "scan_gpu.json"),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (its interpreter)")
def test_every_mode_runs_end_to_end_on_a_toy_shape_and_appends(tmp_path, scan_gpu):
    """The whole benchmark on the CPU under the Triton interpreter, so a GPU session spends no time on
    a broken script: every mode, the capture paths it claims, rows merged across calls by --append."""
    run = _smoke(tmp_path, "--lengths", "40")
    assert run.returncode == 0, run.stderr[-3000:]
    run = _smoke(tmp_path, "--lengths", "40", "72", "--modes", "plain", "scan", "--append")
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "scan_gpu.json").read_text())
    rows = {(r["mode"], r["len"]): r for r in record["rows"]}
    assert sorted(rows) == sorted([(m, 40) for m in scan_gpu.MODES] + [("plain", 72), ("scan", 72)])
    assert rows["scan", 72]["paths"] == ["sdpa-then-entropy"]
    assert rows["scan_fused", 40]["paths"] == ["triton-fused"]
    assert all(r["median_s"] > 0 for r in record["rows"] if r["mode"] != "kernel")
    assert rows["kernel", 40]["entropy_s"] > 0 and rows["kernel", 40]["attention"] in ("sdpa", "flash-attn")
    assert "CPU smoke run" in record["gpu"] and "72 " in run.stdout


def test_append_refuses_rows_from_another_gpu(tmp_path):
    (tmp_path / "scan_gpu.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "rows": []}))
    run = _smoke(tmp_path, "--lengths", "16", "--modes", "plain", "--append")
    assert run.returncode == 1 and "drop --append or choose another --out" in run.stderr


@pytest.mark.slow
def test_host_sums_benchmark_writes_its_table(tmp_path):
    out = tmp_path / "host_sums.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH / "host_sums.py"),
            "--lengths",
            "64",
            "128",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["len"] for r in rows] == [64, 128] and all(r["median_s"] > 0 for r in rows)


@pytest.mark.slow  # its layer modes and memory workers in this process: seconds (a minute with children)
def test_stats_benchmark_times_a_layer_and_measures_the_sums_per_statistic(
    tmp_path, benchmark_script, monkeypatch
):
    """At a toy size: every layer mode (where the native kernel builds), every memory set, each set's sums
    the entropy's plus one sum and its square per statistic, and the benchmarks page's table made from the JSON.
    Each memory set's worker in this process (tests/bench_children.py; in its own under make test-full)."""
    stats_cpu = benchmark_script("stats_cpu")
    commands = children_in_process(stats_cpu, monkeypatch)
    out = tmp_path / "stats_cpu.json"
    argv = ["--parts", "layer", "memory", "--layer-lengths", "64", "--memory-lengths", "96", "--repeats", "1"]
    assert stats_cpu.main([*argv, "--out", str(out)]) == 0
    if commands:  # one measured process per memory set
        assert [c[2:] for c in commands] == [["--memory-worker", "96", s] for s in stats_cpu.MEMORY_SETS]
    record = json.loads(out.read_text())
    layer = record["layer"][0]
    assert "skipped" in layer or list(layer["median_s"]) == list(stats_cpu.LAYER_MODES)
    memory = {r["set"]: r for r in record["memory"]}
    assert list(memory) == list(stats_cpu.MEMORY_SETS)
    one = memory["entropy"]["sums_mb"]
    for name, stats in stats_cpu.MEMORY_SETS.items():
        assert memory[name]["sums_mb"] == pytest.approx(one * len(stats)) and memory[name]["rss_mb"] >= 0
    table = benchmark_script("readme_tables").stats_table(record)
    assert "`all`" in table and "host sums" in table


@pytest.mark.slow
def test_threads_benchmark_runs_a_scan_beside_a_busy_process(tmp_path, benchmark_script):
    """At a toy size: one busy process, --threads 1; the row and the JSON say what ran."""
    threads_cpu = benchmark_script("threads_cpu")
    out = tmp_path / "threads_cpu.json"
    argv = ["--len", "16", "--samples", "1", "--busy", "1", "--threads", "1", "--out", str(out)]
    assert threads_cpu.main(argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["busy_processes"] == 1 and row["threads"] == 1 and row["tok_per_s"] > 0


def test_extras_benchmark_times_every_mode(tmp_path):
    out = tmp_path / "extras_cpu.json"
    argv = [
        sys.executable,
        str(BENCH / "extras_cpu.py"),
        "--lengths",
        "32",
        "--repeats",
        "1",
        "--out",
        str(out),
    ]
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(out.read_text())
    (row,) = record["rows"]
    modes = ("sdpa", "streamed_softcap", "streamed_sinks", "streamed_alibi")
    if record["native"] == "built":  # else native_status() says why, and the native rows are left out
        modes += ("native", "native_softcap", "native_sinks", "native_alibi")
    assert row["len"] == 32 and all(row[f"{m}_s"] > 0 for m in modes)
    assert record["native"] == "built" or not any(k.startswith("native") for k in row)


@pytest.mark.slow
def test_view_benchmark_measures_a_page(tmp_path, benchmark_script):
    """At a toy length: the page's size, and its timings where a browser runs (else null, and why)."""
    view_size = benchmark_script("view_size")
    out = tmp_path / "view_size.json"
    assert view_size.main(["--lengths", "256", "--results", "1", "--repeats", "1", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    (row,) = record["rows"]
    assert row["len"] == 256 and row["points"] == 256 and 4 < row["size_mb"] < 10
    assert (row["interactive_ms"] is None) == (record["no_browser"] is not None)


@pytest.mark.slow  # six measured workers (in this process; six child processes under make test-full)
def test_received_benchmark_times_every_mode_and_checks_received_against_eager(
    tmp_path, benchmark_script, monkeypatch
):
    """benchmarks/received_cpu.py at a toy size (tiny-nope, 48 tokens, the scan target's modes also at 64):
    a row per (mode, length) in that order with time, peak RSS and ratios, received equal to eager's column
    sums, the summary, and the benchmarks page's table made from the JSON. Each worker in this process
    (tests/bench_children.py), one command per (mode, length); in its own process under make test-full."""
    received_cpu = benchmark_script("received_cpu")
    commands = children_in_process(received_cpu, monkeypatch)
    out = tmp_path / "received_cpu.json"
    argv = ["--model", "tiny-nope", "--lengths", "48", "--scan-lengths", "48", "64", "--repeats", "1"]
    assert received_cpu.main([*argv, "--out", str(out)]) == 0
    if commands:
        workers = [tuple(c[c.index("--worker") + 1 :][:2]) for c in commands]
        assert workers == [(m, "48") for m in received_cpu.MODES] + [("recorder", "64"), ("received", "64")]
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["benchmark"] == "received_cpu" and record["model"] == "tiny-nope" and record["repeats"] == 1
    rows = {(r["mode"], r["len"]): r for r in record["rows"]}
    assert list(rows) == [(m, 48) for m in received_cpu.MODES] + [("recorder", 64), ("received", 64)]
    for r in record["rows"]:
        assert (
            r["median_s"] > 0 and len(r["times_s"]) == 1 and r["peak_rss_mb"] >= r["rss_after_load_mb"] > 50
        )
        assert (r["layers"], r["heads"]) == (4, 6) and ("paths" in r) == (
            r["mode"] in received_cpu.SCAN_MODES
        )
    assert rows["plain", 48]["time_over_plain"] == rows["recorder", 48]["time_over_recorder"] == 1.0
    received, recorder = rows["received", 48], rows["recorder", 48]
    assert received["time_over_recorder"] == pytest.approx(received["median_s"] / recorder["median_s"])
    assert rows["received", 64]["time_over_plain"] is None and rows["eager", 48]["needed_gib"] > 0
    assert received["agrees_with_eager"] and 0 <= received["max_rel_received_diff"] < 1e-4
    assert received["max_abs_received_diff"] < 1e-3 and "max_abs_received_diff" not in rows["received", 64]
    summary = record["summary"]
    assert summary["target"] == 1.4 and [x["len"] for x in summary["scan"]] == [48, 64]
    assert summary["check"]["len"] == 48 and summary["check"]["agrees_with_eager"]
    table = benchmark_script("readme_tables").received_cpu_table(record)
    assert (
        "| 48 | received |" in table and "at 48 tokens agree" in table and "(tiny-nope, median of 1)" in table
    )


def test_received_benchmark_says_where_eager_runs_out_of_memory(benchmark_script):
    """A child killed by SIGKILL (the OOM killer) is out of memory, eager's with the size its maps need;
    another signal or failure says what it was; the page's table shows such rows and the summary."""
    received_cpu = benchmark_script("received_cpu")
    shape = {"layers": 30, "heads": 9}
    assert received_cpu.maps_gib(30, 9, 8192) == 67.5
    killed = received_cpu.killed_row("eager", 8192, -9, "", shape)
    assert killed["needed_gib"] == 67.5 and killed["skipped"] == (
        "out of memory (killed by signal 9): the maps need 67.5 GiB (30 layers × 9 heads × 8192² × 4 B)"
    )
    assert (
        received_cpu.killed_row("received", 8192, -9, "", shape)["skipped"]
        == "out of memory (killed by signal 9)"
    )
    assert received_cpu.killed_row("eager", 64, -15, "", shape)["skipped"] == "killed by signal 15"
    assert received_cpu.killed_row("plain", 64, 1, "Traceback\nValueError: boom\n", {})["skipped"] == (
        "failed: Traceback\nValueError: boom"
    )
    row = {"mode": "received", "len": 8192, "median_s": 3.0, "peak_rss_mb": 900.0}
    rows = [{"mode": "recorder", "len": 8192, "median_s": 2.0, "peak_rss_mb": 800.0}]
    received_cpu.add_ratios(row, rows)
    assert row["time_over_recorder"] == 1.5 and row["time_over_plain"] is None
    record = {
        "model": "smollm2",
        "repeats": 3,
        "created_utc": "2026-11-26T00:00:00Z",
        "machine": {"torch_threads": 2, "cores": 2, "cpu": "x86_64", "memory_gib": 23.5, "torch": "2.13"},
        "rows": [*rows, row, killed],
        "summary": received_cpu.summary([*rows, row], [8192, 16384]),
    }
    table = benchmark_script("readme_tables").received_cpu_table(record).splitlines()
    assert table[3] == "| 8,192 | received | 3.00 | 1.50 |  | 900 |  |"
    assert table[4].startswith("| 8,192 | eager | skipped: out of memory (killed by signal 9)")
    assert table[6] == "received over recorder (the scan target, ≤ 1.4×): 1.50× at 8,192."


def test_kvpress_benchmark_table_and_rows_without_kvpress(benchmark_script):
    """kvpress_cpu's page table from a hand-made record (kvpress out of memory at 16K, not run at 32K), its
    summary and a failed child's rows; nothing here imports kvpress."""
    kvpress_cpu = benchmark_script("kvpress_cpu")
    ran = {"attention": "eager", "median_s": 4.0, "peak_rss_mb": 5000.0, "cache_len": 4096, "layers": 30}
    plain = {**ran, "attention": "sdpa", "median_s": 0.8, "peak_rss_mb": 1200.0, "cache_len": 8192}
    rows = [
        {"press": "plain", "len": 8192, **plain},
        {"press": "kvpress", "len": 8192, **ran, "time_over_plain": 5.0},
        {"press": "lens", "len": 8192, **ran, "attention": "sdpa", "median_s": 1.0, "peak_rss_mb": 1250.0},
        {"press": "kvpress", "len": 16384, "skipped": "out of memory in layer 1 of 30: one layer's weights"},
        {"press": "kvpress", "len": 32768, "skipped": "not run: stopped at 16,384"},
    ]
    rows[2].update(
        time_over_kvpress=0.25, time_over_plain=1.25, kept_agree=0.99875, max_rel_score_diff=3.2e-6
    )
    assert kvpress_cpu.summary(rows) == [
        {
            "len": 8192,
            "time_over_kvpress": 0.25,
            "rss_over_kvpress": 0.25,
            "kept_agree": 0.99875,
            "max_rel_score_diff": 3.2e-6,
            "time_over_plain": 1.25,
        }
    ]
    assert kvpress_cpu.failed_row("kvpress", 16384, -9, "")["skipped"] == "out of memory (killed by signal 9)"
    assert kvpress_cpu.failed_row("lens", 64, 1, "Traceback\nValueError: boom\n")["skipped"] == (
        "failed: Traceback\nValueError: boom"
    )
    record = {
        "model": "smollm2",
        "corpus": "austen:persuasion",
        "compression_ratio": 0.5,
        "repeats": 1,
        "created_utc": "2026-11-26T00:00:00Z",
        "machine": {"torch_threads": 2, "cores": 2, "cpu": "x86_64", "memory_gib": 23.5, "torch": "2.13"},
        "rows": rows,
    }
    table = benchmark_script("readme_tables").kvpress_cpu_table(record).splitlines()
    assert table[2] == "| 8,192 | plain | sdpa | 0.80 |  |  | 1,200 | 8,192 |  |  |"
    assert table[3] == "| 8,192 | kvpress | eager | 4.00 |  | 5.00 | 5,000 | 4,096 |  |  |"
    assert table[4] == "| 8,192 | lens | sdpa | 1.00 | 0.25 | 1.25 | 1,250 | 4,096 | 99.88 % | 3.2e-06 |"
    assert table[5].startswith("| 16,384 | kvpress | skipped: out of memory in layer 1 of 30")
    assert table[6] == "| 32,768 | kvpress | skipped: not run: stopped at 16,384 | | | | | | | |"
    assert table[8] == "The lens press over the prefill without a press: 1.25× at 8,192."
    assert "(compression_ratio 0.5), smollm2 on `austen:persuasion`, median of 1" in table[10]


def test_readme_tables_are_the_benchmarks_json(benchmark_script):
    """Every performance table of the benchmarks page is made from a results JSON, never typed; the README
    holds none."""
    script = benchmark_script("readme_tables")
    page = script.TARGET.read_text(encoding="utf-8")
    assert script.TARGET == BENCH.parent / "docs" / "internals" / "benchmarks.md"
    tables = script.tables()
    readme = (BENCH.parent / "README.md").read_text(encoding="utf-8")
    for name, table in tables.items():
        assert table in page, f"regenerate the {name} table: python benchmarks/readme_tables.py"
        assert table.splitlines()[0] not in readme, f"the {name} table belongs on the benchmarks page"
    scaling = (BENCH.parent / "docs" / "scaling.md").read_text(encoding="utf-8")  # its memory model's check
    assert tables["context_parallel_cpu"] in scaling, (
        "copy the context_parallel_cpu table into docs/scaling.md"
    )


@pytest.mark.slow
def test_context_parallel_benchmark_measures_one_process_against_shards(tmp_path, benchmark_script):
    """benchmarks/context_parallel_cpu.py at a toy size: both configurations, each rank's fixed memory,
    growth and peak, the same numbers from both scans, and the benchmarks page's table made from its JSON."""
    bench = benchmark_script("context_parallel_cpu")
    out = tmp_path / "context_parallel_cpu.json"
    assert bench.main(["--model", "tiny-nope", "--len", "40", "--out", str(out)]) == 0
    record = json.loads(out.read_text(encoding="utf-8"))
    rows = record["rows"]
    assert [(r["len"], r["processes"], r["context_parallel"]) for r in rows] == [(40, 1, 1), (40, 2, 2)]
    for r in rows:
        assert len(r["peak_mb"]) == len(r["fixed_mb"]) == len(r["growth_mb"]) == r["processes"]
        assert min(r["fixed_mb"]) > 50 and min(r["growth_mb"]) >= 0
        assert all(p >= f for p, f in zip(r["peak_mb"], r["fixed_mb"], strict=True))
        assert r["modelled_growth_mb"] is None  # tiny-nope is not a shape the memory model lists
    assert record["summary"]["max_abs_entropy_difference"] < 1e-4
    assert record["summary"]["max_abs_loss_difference"] < 1e-4
    big, sharded = (bench.modelled_growth_mb("smollm2", 16384, p) for p in (1, 2))
    assert big > sharded > 0
    assert "| 2 × 1 |" in benchmark_script("readme_tables").context_parallel_table(record)


@pytest.mark.slow
def test_train_benchmark_times_each_mode_in_its_process(tmp_path, benchmark_script, monkeypatch):
    """benchmarks/train_cpu.py at a toy size (tiny-rope, 32 tokens, every=2): the three modes in that
    order, the timed runs (--steps single steps, one block of `every` steps), the steps the monitor recorded (the
    warm-up, then every step or one in `every`), the routes that ran
    named in capture/paths.py's words, the ratios to unmonitored, and the docs' table made from the JSON.
    Its process per mode: one worker command each, run in this process (tests/bench_children.py); under
    make test-full each in a child process of its own."""
    from entropy_lens.capture.paths import PATH_NAMES

    train_cpu = benchmark_script("train_cpu")
    commands = children_in_process(train_cpu, monkeypatch)
    out = tmp_path / "train_cpu.json"
    argv = ["--sizes", "tiny-rope:32", "--every", "2", "--steps", "2", "--rounds", "1", "--out", str(out)]
    assert train_cpu.main(argv) == 0
    if commands:
        assert [c[2:6] for c in commands] == [["--worker", "tiny-rope", "32", m] for m in train_cpu.MODES]
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["benchmark"] == "train_cpu" and record["every"] == 2 and record["device"] == "cpu"
    assert record["goals"] == {"every_step": 1.05, "every_n": 1.01, "peak": 1.05}
    rows = {r["mode"]: r for r in record["rows"]}
    assert [(r["model"], r["len"], r["mode"]) for r in record["rows"]] == [
        ("tiny-rope", 32, m) for m in train_cpu.MODES
    ]
    plain, every, every_n = (rows[m] for m in train_cpu.MODES)
    assert (plain["every"], every["every"], every_n["every"]) == (None, 1, 2)
    assert (plain["recorded"], every["recorded"], every_n["recorded"]) == ([None], [3], [2])
    assert [len(r["step_times_s"]) for r in (plain, every, every_n)] == [2, 2, 1]  # steps, steps, blocks
    assert plain["paths"] == [] and plain["time_over_unmonitored"] == 1.0
    for r in (every, every_n):
        assert r["paths"] and set(r["paths"]) <= set(PATH_NAMES) and r["stats"]
        assert r["time_over_unmonitored"] == pytest.approx(r["step_s"] / plain["step_s"])
        assert r["peak_rss_over_unmonitored"] == pytest.approx(r["peak_rss_mb"] / plain["peak_rss_mb"])
    for r in record["rows"]:
        assert r["step_s"] > 0 and r["peak_rss_mb"] >= r["rss_after_load_mb"] > 0 and r["peak_gpu_mb"] is None
    tables = benchmark_script("readme_tables")
    assert tables.TABLES["train_cpu"] is tables.train_table
    table = tables.train_table(record).splitlines()
    assert len(table) == 2 + 3 + 2 and "(≤ 1.05)" in table[3] and "(≤ 1.01)" in table[4]
    assert table[5] == "" and table[6].startswith(f"Measured {record['created_utc'][:10]} on ")
    assert "1 round(s) of 2 timed steps per mode (1 block(s) of 2 for 1 step in 2)" in table[6]
    low, high = min(plain["step_times_s"]), max(plain["step_times_s"])
    assert f"{plain['step_s']:.2f} ({low:.2f}–{high:.2f})" in table[2]  # the median and the range
    assert f"{every_n['time_over_unmonitored']:.3f} (≤ 1.01)" in table[4]
    assert f"| {'+'.join(every['paths'])} |" in table[3] and table[2].endswith(
        f"| {plain['attn_implementation']} |"
    )


def test_train_benchmark_builds_its_4_layer_model_and_refuses_a_bad_size(benchmark_script):
    train_cpu = benchmark_script("train_cpu")
    model, ids = train_cpu.build("llama4", 16)
    assert model.config.num_hidden_layers == 4 and ids.shape == (1, 16) and int(ids.max()) < 8192
    again, same = train_cpu.build("llama4", 16)
    assert torch.equal(ids, same) and torch.equal(model.lm_head.weight, again.lm_head.weight)  # seeded
    assert train_cpu.parse_size("smollm2:2048") == ("smollm2", 2048)
    with pytest.raises(argparse.ArgumentTypeError, match="write MODEL:LEN"):
        train_cpu.parse_size("smollm2")


@pytest.fixture(scope="module")
def bench(benchmark_script):
    return benchmark_script("_bench")


def test_timer_warms_up_then_times_each_repeat(bench):
    """warm-up calls untimed, `repeats` timed ones each with its sync, times read from the injected clock."""
    ticks = iter([0.0, 1.0, 10.0, 13.0, 20.0, 22.0])  # three timed runs: 1, 3 and 2 s
    calls, syncs = [], []
    timing = bench.timed(
        lambda: calls.append(1), repeats=3, warmup=2, sync=lambda: syncs.append(1), clock=lambda: next(ticks)
    )
    assert len(calls) == len(syncs) == 5
    assert timing.times == [1.0, 3.0, 2.0] and timing.median == 2.0 and timing.best == 1.0
    with pytest.raises(ValueError, match="--repeats 1 or more"):
        bench.timed(lambda: None, repeats=0)


def test_record_round_trip_with_machine_and_schema_version(tmp_path, bench):
    rows = [{"len": 64, "median_s": 0.5}]
    path = bench.write_record(tmp_path / "sub" / "x.json", "x", shape="toy", rows=rows)
    record = bench.read_record(path)
    assert record["benchmark"] == "x" and record["schema_version"] == bench.SCHEMA_VERSION >= 1
    assert record["shape"] == "toy" and record["rows"] == rows and record["created_utc"].endswith("Z")
    machine = record["machine"]
    assert set(machine) == {"cpu", "cores", "memory_gib", "python", "torch", "torch_threads", "gpu"}
    assert machine["cores"] == os.cpu_count() and machine["torch"] == torch.__version__
    assert machine["torch_threads"] == torch.get_num_threads() and machine["memory_gib"] > 0
    assert not list(path.parent.glob("*.tmp*"))  # the atomic write left no temporary file


def test_read_record_takes_files_from_before_the_schema_and_refuses_newer(tmp_path, bench):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"benchmark": "threads_cpu", "cpu_count": 2, "rows": []}))
    assert bench.read_record(old)["schema_version"] == 0
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"schema_version": bench.SCHEMA_VERSION + 1, "rows": []}))
    with pytest.raises(ValueError, match="newer than this checkout"):
        bench.read_record(new)


def test_table_sizes_columns_and_shows_why_a_row_was_skipped(bench):
    rows = [{"len": 1024, "s": 0.25, "base": None}, {"len": 8, "skipped": "out of memory"}]
    columns = [bench.Column("len", "len"), bench.Column("seconds", "s", ".3f"), bench.Column("x", "base")]
    assert bench.table(rows, columns).splitlines() == [
        " len seconds x",
        "1024   0.250 -",
        "   8  skipped: out of memory",
    ]


def test_every_benchmark_script_writes_through_the_shared_helper():
    """No script times, describes the machine or writes its JSON by hand: _bench.py does it once."""
    for script in sorted(BENCH.glob("*.py")):
        if script.name in ("_bench.py", "readme_tables.py"):
            continue
        text = script.read_text(encoding="utf-8")
        assert "from _bench import" in text, script.name
        for hand_made in ("atomic_write_text", "platform.", "time.strftime", "ArgumentParser(", "getrusage("):
            assert hand_made not in text, f"{script.name}: {hand_made} (use benchmarks/_bench.py)"


@pytest.mark.slow
def test_generate_benchmark_times_every_mode_on_a_tiny_model(benchmark_script):
    """Each mode's worker generates after a prompt and reports its total, prefill and decode-step times;
    eager's cap on the address space is gone after it (the process goes on)."""
    import resource

    generate_cpu = benchmark_script("generate_cpu")
    limits = resource.getrlimit(resource.RLIMIT_AS)
    for mode in generate_cpu.MODES:
        row = generate_cpu.worker("tiny-nope", mode, 64, 4, 1)
        assert row["mode"] == mode and row["length"] == 64 and row["new"] == 4, row
        assert 0 < row["prefill_s"] <= row["total_s"] and row["step_ms"] > 0 and row["peak_rss_mb"] > 0
        assert resource.getrlimit(resource.RLIMIT_AS) == limits, mode
    assert "step × plain" in generate_cpu.table([row], generate_cpu.COLUMNS)


def test_the_address_space_cap_holds_in_its_block_only(benchmark_script):
    """An allocation beyond the cap fails inside the block (torch's allocator raises, nothing swaps); the
    limit before it is back after, also when the block raises."""
    import resource

    import torch

    bench = benchmark_script("_bench")
    limits = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(KeyError), bench.capped_address_space() as gib:
        assert gib is not None and gib > 0
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        assert soft != resource.RLIM_INFINITY and (limits[0] == resource.RLIM_INFINITY or soft <= limits[0])
        with pytest.raises((MemoryError, RuntimeError)):
            torch.empty(int(soft), dtype=torch.uint8)  # more bytes than the whole space may map
        raise KeyError("leaving by an error")
    assert resource.getrlimit(resource.RLIMIT_AS) == limits


def test_a_measured_process_gives_its_last_json_row_or_says_why_not(benchmark_script, tmp_path):
    """_bench.worker_row (generate_cpu, polygraph_cpu): the last JSON line a worker printed; a worker
    that printed none leaves the row skipped with the end of its stderr, or the signal that killed it.
    _bench.run_json (peers_cpu, train_cpu, stats_cpu): the last line's JSON, or RuntimeError with the end
    of its stderr. (The benchmark tests run their workers in their own process: tests/bench_children.py;
    these are the process boundary they leave out.) kept_rows: --keep's rows of an existing file that
    this run does not measure."""
    import sys

    bench = benchmark_script("_bench")
    said = "import json; print('warming up'); print(json.dumps({'x': 1})); print(json.dumps({'x': 2}))"
    assert bench.worker_row([sys.executable, "-c", said], {"mode": "a"}) == {"x": 2}
    assert bench.run_json([sys.executable, "-c", said]) == {"x": 2}
    with pytest.raises(RuntimeError, match="^failed: boom$"):
        bench.run_json([sys.executable, "-c", "import sys; sys.exit('boom')"])
    failed = bench.worker_row([sys.executable, "-c", "import sys; sys.exit('boom')"], {"mode": "b"})
    assert failed == {"mode": "b", "skipped": "failed (boom)"}
    killed = bench.worker_row(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], {}
    )
    assert killed == {"skipped": "failed (signal 9)"}
    out = tmp_path / "b.json"
    bench.write_json(
        out, bench.make_record("b", rows=[{"mode": "a", "length": 1}, {"mode": "b", "length": 1}])
    )
    key = lambda r: (r["mode"], r["length"])
    assert bench.kept_rows(out, True, {("a", 1)}, key) == [{"mode": "b", "length": 1}]
    assert (
        bench.kept_rows(out, False, set(), key) == []
        and bench.kept_rows(tmp_path / "no.json", True, set(), key) == []
    )
