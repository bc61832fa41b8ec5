"""A benchmark's measured child processes run inside the test's process, for the toy-sized runs of
tests/benchmarks, tests/polygraph_cases.py and tests/kvpress_cases.py.

Each benchmark script runs every (mode, length) as `python benchmarks/<script>.py ... --worker ...` in a
fresh process, so that its peak RSS is its own. At a test's toy size a child is almost all start-up
(torch, transformers, the model's classes: 5 to 15 s on 2 cores) and the work it measures a fraction of
a second, so the default test runs each such child as the script's own `main(argv)` in this process,
with its stdout and stderr captured and its exit status returned as a child's would be: the script's
command lines, its worker's argument parsing, its rows and its JSON are the ones a real run makes; only
the process boundary is left out. That boundary is tested on its own (`run_json` and `worker_row` in
tests/benchmarks/test_benchmarks.py::test_a_measured_process_gives_its_last_json_row_or_says_why_not),
and `make test-full` (ENTROPY_LENS_TEST_GRID=full) runs every benchmark test with real children again.

    commands = children_in_process(module, monkeypatch)   # a no-op under make test-full
    assert module.main([...]) == 0
    assert len(commands) == ...                            # one command per measured process
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

from kernel_grid import grid_kind

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str):
    """benchmarks/<name>.py as a module, imported from its path (benchmarks/ is not a package and never
    goes on sys.path): tests/conftest.py's `benchmark_script` fixture, and a child's script here."""
    spec = importlib.util.spec_from_file_location(f"benchmarks.{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script(path: Path, own):
    """The module of benchmarks/`path` (`own` where it is the script under test)."""
    return own if Path(own.__file__).resolve() == path else load_script(path.stem)


def children_in_process(module, monkeypatch) -> list[list[str]]:
    """Make `module` (a benchmark script loaded by tests/conftest.py's `benchmark_script`) run each child
    `[sys.executable, benchmarks/<script>.py, *argv]` it starts (through `subprocess.run`, `run_json` or
    `worker_row`) as that script's `main(argv)` in this process; any other command (torchrun, `python -m`)
    still starts a process. Returns the list the child commands are appended to (empty, and nothing
    patched, under `make test-full`: the real children run there)."""
    commands: list[list[str]] = []
    if grid_kind() == "full":
        return commands
    real_run = subprocess.run

    def run(cmd, *args, env=None, **kwargs):
        cmd = [str(c) for c in cmd]
        path = Path(cmd[1]).resolve() if len(cmd) > 1 else None
        if env is not None or cmd[0] != sys.executable or path is None or path.parent != BENCHMARKS:
            return real_run(cmd, *args, env=env, **kwargs)
        commands.append(cmd)
        import torch

        threads = torch.get_num_threads()  # a worker's --threads is its process's own
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = _script(path, module).main(cmd[2:]) or 0
            except SystemExit as stop:  # argparse's errors, sys.exit(...)
                code = stop.code if isinstance(stop.code, int) else 1
                if not isinstance(stop.code, int) and stop.code is not None:
                    print(stop.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what a child prints before it exits 1
                traceback.print_exc()
                code = 1
        torch.set_num_threads(threads)
        return subprocess.CompletedProcess(cmd, code, out.getvalue(), err.getvalue())

    fake = SimpleNamespace(run=run, Popen=subprocess.Popen, CompletedProcess=subprocess.CompletedProcess)
    if getattr(module, "subprocess", None) is subprocess:
        monkeypatch.setattr(module, "subprocess", fake)
    for name in ("run_json", "worker_row"):  # _bench's helpers, as the script imported them
        helper = getattr(module, name, None)
        if helper is not None and helper.__globals__.get("subprocess") is subprocess:
            monkeypatch.setitem(helper.__globals__, "subprocess", fake)
    return commands
