"""A pytest plugin for the child processes that run the Triton kernels under TRITON_INTERPRET=1
(`-p triton_interp_plugin`, tests/ on PYTHONPATH): the interpreter re-patches triton.language on every
call of a @triton.jit helper (`interpreter._patch_lang`: a walk over every member of tl, tl.core, tl.math
and tl.tensor, a few milliseconds), although the launch around the call patched the same modules already.
Inside a launch, a helper whose language modules that launch has patched skips the walk; every other
patch runs as before, and the launch restores what it patched as before. The kernels' arithmetic is
untouched: the same patched functions run. Measured: a split decode launch of 128 programs 6 s -> 3 s.

Where Triton's interpreter lacks these names (another version), the plugin does nothing."""

from __future__ import annotations

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    try:
        from triton.runtime import interpreter
    except ImportError:  # no Triton: the case files skip themselves
        interpreter = None
    executor = getattr(interpreter, "GridExecutor", None)
    grid_call = vars(executor).get("__call__") if executor is not None else None
    patch_lang = getattr(interpreter, "_patch_lang", None)
    scope_type = getattr(interpreter, "_LangPatchScope", None)
    if grid_call is not None and patch_lang is not None and scope_type is not None:
        LAUNCH = {"depth": 0, "patched": frozenset()}  # the language modules the running launch patched

        def _langs(fn) -> frozenset:
            language = interpreter.tl
            return frozenset(id(v) for v in fn.__globals__.values() if v is language or v is language.core)

        def _launch(self, *args, **kwargs):
            LAUNCH["depth"] += 1
            try:
                return grid_call(self, *args, **kwargs)
            finally:
                LAUNCH["depth"] -= 1
                if not LAUNCH["depth"]:
                    LAUNCH["patched"] = frozenset()  # restored by the launch: patch again next time

        def _patch_once(fn):
            langs = _langs(fn)
            if LAUNCH["depth"] and LAUNCH["patched"] and langs <= LAUNCH["patched"]:
                return scope_type()  # already patched in this launch: nothing to change or restore
            scope = patch_lang(fn)
            if LAUNCH["depth"]:
                LAUNCH["patched"] |= langs
            return scope

        interpreter.GridExecutor.__call__ = _launch
        interpreter._patch_lang = _patch_once


def run_under_the_interpreter(paths, keyword: str | None = None, timeout: float = 900):
    """pytest on `paths` (test files) in a child process under TRITON_INTERPRET=1 with this plugin, one
    thread, -x; `keyword` its -k. Asserts that it passed and skipped nothing."""
    import subprocess
    import sys
    from pathlib import Path

    here = str(Path(__file__).parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "triton_interp_plugin", "-x"]
    cmd += ["-W", "ignore::RuntimeWarning"]  # numpy evaluates both sides of tl.where
    cmd += ["-k", keyword] if keyword else []
    cmd += [str(path) for path in paths]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]
