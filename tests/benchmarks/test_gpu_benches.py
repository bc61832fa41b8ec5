"""The GPU benchmarks of issue 69 without a GPU: the kernel sweep (config by config, against sdpa and an
earlier copy of the kernel) and the scan's overhead profile run end to end on a toy shape under the Triton
interpreter, so a device session spends no time on a broken script; their refusals and arithmetic."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).parents[2] / "benchmarks"
KERNEL = Path(__file__).parents[2] / "entropy_lens" / "kernels" / "triton_entropy.py"
needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="needs triton (its interpreter)"
)


def _run(script: str, *args, interpret: bool = True):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **({"TRITON_INTERPRET": "1"} if interpret else {})}
    cmd = [sys.executable, str(BENCH / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)


def test_the_sweep_counts_the_products_of_a_causal_half(benchmark_script):
    sweep = benchmark_script("fused_sweep_gpu")
    assert sweep.attention_flops(2, 4, 8, products=1) == 2 * 2 * 10 * 8  # 4·5/2 visible (query, key) pairs
    assert sweep.attention_flops(2, 4, 8, products=2) == 2 * sweep.attention_flops(2, 4, 8, products=1)


@pytest.mark.parametrize("config", ["64,64,4", "64,0,4,2", "a,b,c,d"])
def test_the_sweep_refuses_a_config_it_cannot_read(config):
    run = _run("fused_sweep_gpu.py", "--configs", config, interpret=False)
    assert run.returncode == 2 and "BLOCK_M,BLOCK_N,num_warps,num_stages" in run.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on machines without CUDA")
@pytest.mark.parametrize("script", ["fused_sweep_gpu.py", "scan_overhead_gpu.py", "decode_gpu.py"])
def test_each_refuses_without_cuda(script):
    run = _run(script, "--lengths", "16", interpret=False)
    assert run.returncode == 1 and "needs a CUDA GPU" in run.stderr


@pytest.mark.slow
@needs_triton
def test_the_sweep_runs_every_config_and_a_baseline_on_a_toy_shape(tmp_path):
    out = tmp_path / "sweep.json"
    args = ["--device", "cpu", "--tiny", "--lengths", "40", "--repeats", "1", "--out", str(out)]
    run = _run("fused_sweep_gpu.py", *args, "--configs", "32,32,4,2", "16,32,4,2", "--baseline", str(KERNEL))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    kinds = [(r["kind"], r["config"]) for r in rows]
    for kind in ("fused", "entropy"):
        assert (kind, [32, 32, 4, 2]) in kinds and (kind, [16, 32, 4, 2]) in kinds
        assert (kind + " autotuned", None) in kinds and (kind + " baseline", None) in kinds
    timed = [r for r in rows if r["kind"] != "sdpa"]
    # every config computes the same entropy as the first (the kernel is the same arithmetic), to fp32
    assert all(r["entropy_diff"] <= 1e-5 for r in timed), [r["entropy_diff"] for r in timed]
    # the output is sdpa's to bf16's rounding of values of magnitude <= 1 (2^-8, twice)
    assert all(r["output_diff"] <= 2**-7 for r in timed if r["kind"].startswith("fused"))
    assert all(r["s"] > 0 and r["x_sdpa"] > 0 for r in rows)
    assert "x sdpa" in run.stdout


@pytest.mark.slow
@needs_triton
def test_the_overhead_profile_runs_every_mode_on_a_toy_shape(tmp_path):
    out = tmp_path / "overhead.json"
    run = _run(
        "scan_overhead_gpu.py",
        "--device",
        "cpu",
        "--tiny",
        "--lengths",
        "24",
        "--repeats",
        "1",
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["mode"] for r in rows] == ["plain", "forward", "scan"]
    assert all(r["median_s"] > 0 and r["top_host_ops_ms"] for r in rows)
    assert all(r["launches"] == 0 for r in rows)  # no CUDA runtime on the CPU


def test_the_decode_benchmark_refuses_arguments_it_cannot_run(benchmark_script):
    decode = benchmark_script("decode_gpu")
    args = decode.build_parser().parse_args([])
    assert (
        args.lengths == [4096, 16384, 32768]
        and args.parts == ["kernel", "step"]
        and decode.check_args(args) is None
    )
    for argv, why in (
        (["--lengths", "1"], "a cache of 2 tokens or more"),
        (["--sweep", "0"], "1 (the row kernel) or more"),
        (["--repeats", "0"], "at least one run"),
    ):
        assert why in decode.check_args(decode.build_parser().parse_args(argv))
    run = _run("decode_gpu.py", "--lengths", "1", interpret=False)
    assert run.returncode == 2 and "a cache of 2 tokens or more" in run.stderr


def test_the_decode_benchmark_writes_ratios_table_and_json(benchmark_script, tmp_path):
    """A hand-made run: each row's ratio to its length's sdpa (kernel) or plain (step) row, the recorded
    step held to the 1.2x target, the table and the record."""
    decode = benchmark_script("decode_gpu")
    rows = [
        {"part": "kernel", "len": 16384, "mode": "sdpa", "splits": None, "median_ms": 0.02},
        {
            "part": "kernel",
            "len": 16384,
            "mode": "fused",
            "splits": 17,
            "median_ms": 0.03,
            "entropy_diff": 1e-6,
        },
        {"part": "step", "len": 16384, "mode": "plain", "median_ms": 10.0},
        {"part": "step", "len": 16384, "mode": "recorded", "median_ms": 11.0},
        {"part": "step", "len": 32768, "mode": "recorded", "median_ms": 30.0},  # its plain row is missing
    ]
    out = tmp_path / "decode.json"
    decode.write(out, rows, gpu="none: a test", shape={"heads": 32})
    record = json.loads(out.read_text())
    assert (
        record["benchmark"] == "decode_gpu" and record["target"] == 1.2 and record["shape"] == {"heads": 32}
    )
    got = record["rows"]
    assert [r["x_ref"] for r in got[:4]] == pytest.approx([1.0, 1.5, 1.0, 1.1]) and got[4]["x_ref"] is None
    assert got[3]["within_target"] is True and "within_target" not in got[4]
    text = decode.table(decode.with_ratios(rows), decode.COLUMNS).splitlines()
    assert text[0].split()[:4] == ["part", "len", "mode", "splits"]
    assert "1.50" in text[2] and "1.0e-06" in text[2] and text[5].split()[-3:] == ["-", "-", "-"]


@pytest.mark.slow
@needs_triton
def test_the_decode_benchmark_runs_both_parts_on_a_toy_shape(tmp_path):
    out = tmp_path / "decode.json"
    args = [
        "--device",
        "cpu",
        "--tiny",
        "--lengths",
        "64",  # two key blocks: the interpreter's time goes with the cache and the prefill's length
        "--repeats",
        "1",
        "--sweep",
        "3",
        "--out",
        str(out),
    ]
    run = _run("decode_gpu.py", *args)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["part"], r["mode"], r["splits"]) for r in rows if r["part"] == "kernel"] == [
        ("kernel", "sdpa", None),
        ("kernel", "entropy", 1),
        ("kernel", "entropy", 1),  # 64 keys: decode_splits keeps the row kernel
        ("kernel", "fused", 1),
        ("kernel", "fused", 1),
        ("kernel", "fused", 3),
    ]
    assert [(r["mode"], r["splits"]) for r in rows if r["part"] == "step"] == [
        ("plain", None),
        ("recorded", 1),
        ("recorded_row", 1),
    ]
    assert all(r["median_ms"] > 0 and r["x_ref"] > 0 for r in rows)
    # the split counts give the row kernel's entropy to fp32 and its output to bf16's rounding
    assert all(r.get("entropy_diff", 0) <= 1e-5 and r.get("output_diff", 0) <= 2**-7 for r in rows)
    assert "x ref" in run.stdout
