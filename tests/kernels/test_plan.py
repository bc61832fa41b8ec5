"""The one plan (kernels/plan.py): which path and kernel each route of a layer takes under --backend and
--fused; the records it passes (ScoreMods) and returns (RowStats); the statistics' registry."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from every_statistic import every_statistic

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import parse_backend, parse_fused
from entropy_lens.kernels import (
    BACKENDS,
    ScoreMods,
    attention_entropy,
    attention_stats,
    attention_with_entropy,
    native_available,
    plan,
    resolve_backend,
)
from entropy_lens.statistics import MAX_PROB, SINK_MASS, STATISTICS

ALL = tuple(STATISTICS)
NATIVE_ONE_PASS = "native" if native_available() else "torch-streamed"
NATIVE_KERNEL = "native" if native_available() else "torch_chunked"


def _inputs(D=8, Dv=8):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(1, 4, 6, D, generator=g),
        torch.randn(1, 2, 6, D, generator=g),
        torch.randn(1, 2, 6, Dv),
    )


def _routes(backend, fused, extras=False, fusable=True):
    q, k, v = _inputs()
    mods = ScoreMods.build(q, k, softcap=30.0 if extras else None)
    layer = plan(parse_backend(backend), parse_fused(fused), q, k, v, mods, fusable=fusable)
    as_pair = lambda r: None if r is None else (r.path, r.kernel)
    return as_pair(layer.separate), as_pair(layer.fused), as_pair(layer.fixed)


@pytest.mark.parametrize(
    "backend,fused,extras,want",
    [
        ("auto", "auto", False, (("sdpa-then-entropy", "torch_chunked"), (NATIVE_ONE_PASS, NATIVE_KERNEL))),
        ("auto", "off", False, (("sdpa-then-entropy", "torch_chunked"), None)),
        ("auto", "auto", True, (("torch-streamed", "torch_chunked"), ("native", "native"))),
        (
            "torch_chunked",
            "on",
            False,
            (("sdpa-then-entropy", "torch_chunked"), ("torch-streamed", "torch_chunked")),
        ),
        ("torch_chunked", "on", True, (("torch-streamed", "torch_chunked"), None)),
        ("native", "on", False, (("sdpa-then-entropy", "native"), ("native", "native"))),
        ("native", "on", True, (("native", "native"), None)),
        ("reference", "on", False, (("sdpa-then-entropy", "reference"), None)),
    ],
)
def test_each_route_names_its_path_and_kernel_on_cpu(backend, fused, extras, want):
    """An explicit backend is the kernel of every route (`--backend torch_chunked --fused on` is the
    torch path's one pass, never the native kernel); "auto" on CPU is torch_chunked for the separate
    pass and native for the one pass where it builds; a one pass equal to the separate route is none."""
    if (backend == "native" or extras) and not native_available():
        pytest.skip("the native kernel does not build here")
    separate, one_pass, _ = _routes(backend, fused, extras)
    assert (separate, one_pass) == want


def test_fused_mode_picks_the_fixed_route_and_auto_leaves_two():
    separate, one_pass, fixed = _routes("torch_chunked", "auto")
    assert fixed is None and one_pass == ("torch-streamed", "torch_chunked")
    assert _routes("torch_chunked", "on")[2] == one_pass
    assert _routes("torch_chunked", "off")[2] == separate
    assert _routes("torch_chunked", "on", fusable=False)[1:] == (None, separate)  # gradients, dropout
    with pytest.raises(EntropyLensError, match="auto, on, off"):
        _routes("auto", "sometimes")


def test_backends_name_every_kernel_and_each_runs_or_says_why():
    assert BACKENDS == ("reference", "torch_chunked", "native", "triton")
    q, k, _ = _inputs()
    ref = attention_entropy(q, k, softmax_scale=0.3, backend="reference")
    for backend in ("torch_chunked", "native"):
        if backend == "native" and not native_available():
            with pytest.raises(EntropyLensError, match="native CPU kernel is unavailable"):
                resolve_backend("native", "cpu")
            continue
        got = attention_entropy(q, k, softmax_scale=0.3, backend=backend)
        assert (got - ref).abs().max().item() <= 1e-5
    with pytest.raises(EntropyLensError, match="runs on CPU tensors"):
        resolve_backend("native", "cuda")
    with pytest.raises(EntropyLensError, match="unknown entropy backend"):
        resolve_backend("flash")


def test_score_mods_are_validated_once_and_frozen():
    q, k, _ = _inputs()
    mods = ScoreMods.build(q, k, causal=False, mask=torch.ones(1, 6, dtype=torch.bool), sinks=torch.zeros(4))
    assert mods.mask.shape == (1, 1, 1, 6) and mods.sinks.dtype == torch.float32 and not mods.sdpa_computes
    with pytest.raises(dataclasses.FrozenInstanceError):
        mods.softcap = 3.0
    with pytest.raises(TypeError, match="sofcap"):
        ScoreMods.build(q, k, sofcap=3.0)
    with pytest.raises(ValueError, match="sliding window applies to causal"):
        ScoreMods.build(q, k, causal=False, window=3)
    with pytest.raises(ValueError, match="alibi_slopes must have shape"):
        ScoreMods.build(q, k, alibi_slopes=torch.ones(3))


def test_every_kernel_computes_every_declared_statistic_as_the_reference_does():
    """Each statistic entropy_lens.statistics declares comes out of every kernel (torch_chunked, native
    where it builds; Triton in the test below), separate and with the output, equal to the reference's
    float64 definition: no kernel computes only some (a new statistic lands in every kernel at once)."""
    every_statistic(["torch_chunked"] + (["native"] if native_available() else []))


@pytest.mark.slow
def test_the_triton_kernel_computes_every_declared_statistic_under_the_interpreter():
    """The same for the Triton kernel, under the interpreter in its own process."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    script = Path(__file__).parents[1] / "every_statistic.py"
    done = subprocess.run(
        [sys.executable, "-W", "ignore::RuntimeWarning", str(script), "triton"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and "['triton']" in done.stdout, done.stderr[-3000:]


def test_the_entry_points_return_what_is_asked_for():
    q, k, v = _inputs()
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    want = attention_stats(q, k, softmax_scale=0.4, sinks=sinks, stats=ALL, backend="reference")
    rows = attention_with_entropy(q, k, v, softmax_scale=0.4, sinks=sinks, stats=(SINK_MASS.name,))
    assert list(rows) == [SINK_MASS.name] and rows.out.shape == (1, 6, 4, 8)
    with pytest.raises(ValueError, match="unknown row statistic"):
        attention_with_entropy(q, k, v, softmax_scale=0.4, stats=("fading",))
    rows = attention_with_entropy(q, k, v, softmax_scale=0.4, sinks=sinks, stats=(MAX_PROB.name,))
    assert (rows[MAX_PROB.name] - want[MAX_PROB.name]).abs().max().item() <= 1e-5
