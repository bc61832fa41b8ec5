"""The lm-polygraph environment's tests in a child process of .venv-polygraph/bin/python
(tests/polygraph_cases.py: entropy_lens.polygraph against lm-polygraph itself). `make polygraph-env`
builds the environment (`make test` runs it); where it is missing these tests skip and say why. The
child's caches (Hugging Face, NLTK) are a folder of the test's own, never the user's."""

import os
import subprocess
from pathlib import Path

import pytest

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
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    env |= {"HF_HOME": str(tmp_path / "hf"), "NLTK_DATA": str(tmp_path / "nltk"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    cmd = [
        str(PYTHON),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-x",
        str(ROOT / "tests" / "polygraph_cases.py"),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last, last
