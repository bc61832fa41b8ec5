"""The lm-polygraph environment's tests in a child process of .venv-polygraph/bin/python
(tests/polygraph_cases.py: entropy_lens.polygraph against lm-polygraph itself). `make polygraph-env`
builds the environment (`make test` runs it); where it is missing these tests skip and say why. The
child's caches (Hugging Face, NLTK) are a folder of the test's own, never the user's."""

from pathlib import Path

import pytest
from environments import run_cases

ROOT = Path(__file__).parents[2]
PYTHON = ROOT / ".venv-polygraph" / "bin" / "python"
STAMP = ROOT / ".venv-polygraph" / ".polygraph-installed"


def missing() -> str | None:
    """Why the lm-polygraph environment cannot run here, or None."""
    if not STAMP.is_file() or not PYTHON.is_file():
        return "no .venv-polygraph (make polygraph-env builds it: lm-polygraph 0.7.0 and what it pulls)"
    return None


@pytest.mark.slow
def test_in_the_polygraph_environment(tmp_path):
    why = missing()
    if why:
        pytest.skip(why)
    run_cases(
        PYTHON,
        "polygraph_cases.py",
        HF_HOME=str(tmp_path / "hf"),
        NLTK_DATA=str(tmp_path / "nltk"),
        HF_HUB_OFFLINE="1",
    )
