"""Ctrl-C in the first second of `entropy-lens` (while the command line is read and torch, transformers and
the package are imported) exits quietly with status 130 and one line, as it does during a run: a
KeyboardInterrupt raised inside an import used to come out as a traceback (4 of 30 runs), once as another
error (a RuntimeError from a dataclass's __set_name__) and once as an abort."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# from 0.1 s: before that Python itself is starting (site, the console script's own first import), where
# no code of the package has run yet
DELAYS_S = (0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0, 1.2)


def _launchers() -> list[list[str]]:
    """`python -m entropy_lens`, and the console script where this environment has one."""
    script = Path(sys.executable).parent / "entropy-lens"
    return [[sys.executable, "-m", "entropy_lens"]] + ([[str(script)]] if script.is_file() else [])


@pytest.mark.slow
@pytest.mark.parametrize("launcher", _launchers(), ids=lambda argv: Path(argv[-1]).name)
def test_ctrl_c_during_start_up_is_one_line_and_status_130(launcher, tmp_path):
    env = {**os.environ, "ENTROPY_LENS_CACHE": str(tmp_path / "cache")}
    argv = [
        "scan",
        "tiny-nope",
        "--len",
        "512",
        "--samples",
        "64",
        "--out",
        str(tmp_path / "x.npz"),
        "--quiet",
    ]
    for delay in DELAYS_S:
        run = subprocess.Popen(
            [*launcher, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        time.sleep(delay)
        run.send_signal(signal.SIGINT)
        err = run.communicate(timeout=120)[1]
        assert "Traceback" not in err and run.returncode == 130, (delay, run.returncode, err)
        lines = [line for line in err.splitlines() if "warning" not in line]
        assert lines and all(line.startswith("entropy-lens:") for line in lines), (delay, err)
        assert "entropy-lens: interrupted" in err or "interrupted after" in err, (delay, err)
