"""Runs the Triton kernel's cases in their own process under TRITON_INTERPRET=1 (the Triton kernel on CPU),
so the interpreter setting never leaks into the rest of the suite: tests/triton_interp_cases.py (its own
cases) and the triton cases of the grids every kernel shares (kernel_cases.RUNNABLE, in test_kernels.py,
test_kernels_extras.py, test_kernels_alibi.py, test_reliability_numerics.py), which the main process does not
collect (kernel_cases.RUNNABLE holds the triton case only where it runs)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import resolve_backend

pytest.importorskip("triton")
HERE = Path(__file__).parents[1]  # tests/
# the shared grids, of which `-k triton` keeps the triton cases (and every case of triton_interp_cases.py,
# whose module name matches too)
SHARED = (
    "kernels/test_kernels.py",
    "kernels/test_kernels_extras.py",
    "kernels/test_kernels_alibi.py",
    "kernels/test_reliability_numerics.py",
)


@pytest.mark.slow
@pytest.mark.parametrize("cases", ["triton_interp_cases.py", *SHARED])
def test_triton_kernel_under_the_interpreter(cases):
    """One child process per file of cases, so the test workers share them out (they took 850 s as one)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-x",
        "-W",
        "ignore::RuntimeWarning",  # numpy evaluates both sides of tl.where
        "-k",
        "triton",
        str(HERE / cases),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]


def test_backend_selection(monkeypatch):
    monkeypatch.delenv("ENTROPY_LENS_BACKEND", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert resolve_backend("auto", "cpu") == "torch_chunked"
    assert resolve_backend("triton") == "triton"  # name check only (e.g. ScanConfig.check before a CUDA scan)
    with pytest.raises(
        EntropyLensError, match="--device cuda, --backend torch_chunked, or set TRITON_INTERPRET"
    ):
        resolve_backend("triton", "cpu")
    monkeypatch.setenv("ENTROPY_LENS_BACKEND", "triton")
    with pytest.raises(EntropyLensError, match="CUDA tensors"):
        resolve_backend("auto", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_backend("auto", "cpu") == "triton"


def test_missing_triton_is_a_clear_error(monkeypatch):
    import importlib

    backends = importlib.import_module("entropy_lens.kernels.backends")  # where the table checks triton
    monkeypatch.setattr(backends, "triton_available", lambda: False)
    with pytest.raises(EntropyLensError, match="pip install triton"):
        resolve_backend("triton", "cuda")
    assert resolve_backend("auto", "cuda") == "torch_chunked"
