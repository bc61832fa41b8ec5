"""nnsight with the recorders (tests/nnsight_cases.py) in a child process of this Python: importing nnsight
patches torch.Tensor.backward for the whole process, which no other test should run under. Skips, saying
why, where nnsight is not installed (`make` installs the extra `nnsight`)."""

import importlib.util
import sys
from pathlib import Path

import pytest
from environments import run_cases


@pytest.mark.slow
def test_nnsight_cases_in_a_process_of_their_own():
    if importlib.util.find_spec("nnsight") is None:
        pytest.skip("no nnsight (the extra `nnsight`; `make` installs it)")
    run_cases(Path(sys.executable), "nnsight_cases.py")
