"""The kvpress environment's tests, each file in a child process of .venv-kvpress/bin/python (kvpress 0.5.5
needs transformers < 5.3; this environment has the newest): tests/kvpress_cases.py (entropy_lens.kvpress
against kvpress itself) and a subset of the package's own tests under transformers 5.2, the floor's line
(`transformers>=5.0`). That the environment is transformers 5.2 with kvpress 0.5.5 is a case of
kvpress_cases.py, and so is the kvpress benchmark's toy run (no process of their own). `make kvpress-env`
builds the environment (`make test` runs it); where it is missing these tests skip and say why."""

from pathlib import Path

import pytest
from environments import run_cases

ROOT = Path(__file__).parents[2]
PYTHON = ROOT / ".venv-kvpress" / "bin" / "python"
STAMP = ROOT / ".venv-kvpress" / ".kvpress-installed"
# (file of cases, what it covers): the capture's core tests stand for the package under transformers 5.2
CASES = {
    "kvpress_cases.py": "entropy_lens.kvpress against kvpress 0.5.5",
    "capture/test_capture.py": "the capture's core tests under transformers 5.2",
}


def missing() -> str | None:
    """Why the kvpress environment cannot run here, or None."""
    if not STAMP.is_file() or not PYTHON.is_file():
        return "no .venv-kvpress (make kvpress-env builds it: kvpress 0.5.5 needs transformers < 5.3)"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("cases", sorted(CASES))
def test_in_the_kvpress_environment(cases):
    why = missing()
    if why:
        pytest.skip(why)
    run_cases(PYTHON, cases)
