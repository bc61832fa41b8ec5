"""A file of cases run by pytest in a child process of another environment's Python (.venv-kvpress,
.venv-polygraph: the extras whose pins are not .venv's), and its result checked: every case passed,
none skipped (a skip there would mean the environment lacks what it was built for)."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]


def run_cases(python: Path, cases: str, **env: str) -> None:
    """pytest on tests/`cases` under `python` (OMP_NUM_THREADS 2 unless set; `env` added), its model cache
    the run's (conftest.run_cache: the bundled GGUF converted once a run)."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), **env}
    env.setdefault("ENTROPY_LENS_TEST_CACHE", os.environ["ENTROPY_LENS_CACHE"])
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", str(ROOT / "tests" / cases)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last, last
