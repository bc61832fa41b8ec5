"""Runs the Triton kernel's cases in their own process under TRITON_INTERPRET=1 (the Triton kernel on CPU),
so the interpreter setting never leaks into the rest of the suite: tests/triton_interp_cases.py (its own
cases) and the triton cases of the grids every kernel shares (kernel_cases.RUNNABLE, in test_kernels.py,
test_kernels_extras.py, test_kernels_alibi.py, test_reliability_numerics.py), which the main process does not
collect (kernel_cases.RUNNABLE holds the triton case only where it runs). Two child processes, one for
each, so two test workers share them out and each pays torch's and Triton's import once."""

from pathlib import Path

import pytest
from triton_interp_plugin import run_under_the_interpreter

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import resolve_backend

pytest.importorskip("triton")
HERE = Path(__file__).parents[1]  # tests/
SHARED = (
    "kernels/test_kernels.py",
    "kernels/test_kernels_extras.py",
    "kernels/test_kernels_alibi.py",
    "kernels/test_reliability_numerics.py",
)


@pytest.mark.slow
@pytest.mark.parametrize("cases", [("triton_interp_cases.py",), SHARED], ids=["own-cases", "shared-grids"])
def test_triton_kernel_under_the_interpreter(cases):
    """The kernel's own cases in one child process, the shared grids' triton cases in another."""
    # -k triton keeps the shared grids' triton cases (and every case of triton_interp_cases.py)
    run_under_the_interpreter([HERE / name for name in cases], keyword="triton")


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
