"""The native kernel's build cache as users break it: a build killed at any moment, a library cut
short, two checkouts sharing one cache, a read-only cache, a compiler that is missing. Real processes,
real signals, real files; each case would hang, crash or rebuild silently before build.py."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from tiny import make_tiny_model

from entropy_lens.kernels import native
from entropy_lens.kernels.native import NativeState, native_available, native_module, native_status
from entropy_lens.kernels.native.build import (
    MANIFEST,
    SOURCE,
    build_extension,
    cache_key,
    cache_root,
    check_library,
    compiler_flags,
    failure_reason,
)

pytestmark = pytest.mark.skipif(not native_available(), reason=f"native kernel {native_status()}")
PACKAGE = Path(native.__file__).parents[3]  # the folder holding entropy_lens/
LOAD = "from entropy_lens.kernels.native import native_module, native_status; m = native_module(); "
LOAD += "print(native_status()); print(m.__file__ if m else '')"


def _key() -> str:
    return cache_key(SOURCE.read_bytes(), compiler_flags())


def _load(cache: Path, *, pythonpath: Path = PACKAGE, timeout=300, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LOAD],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "ENTROPY_LENS_NATIVE_CACHE": str(cache), "PYTHONPATH": str(pythonpath), **env},
    )


@pytest.fixture
def valid_cache(tmp_path) -> Path:
    """A copy of this session's verified build, in a cache of its own."""
    assert native_module() is not None
    copy = tmp_path / "cache"
    shutil.copytree(cache_root() / _key(), copy / _key())
    assert isinstance(check_library(copy / _key()), tuple)
    return copy


def _tree(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
    }


@pytest.mark.slow
def test_a_build_killed_at_any_moment_never_blocks_a_later_run(tmp_path):
    cache = tmp_path / "cache"
    first = subprocess.Popen(
        [sys.executable, "-c", LOAD],
        env={**os.environ, "ENTROPY_LENS_NATIVE_CACHE": str(cache)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(cache.glob("*.build-*/build.ninja")) and time.monotonic() < deadline:
        time.sleep(0.05)  # ninja's file is written just before the compiler starts
    time.sleep(1.0)
    os.killpg(first.pid, signal.SIGKILL)  # the compiler and ninja with it, as a closed terminal does
    first.wait()
    assert list(cache.glob("*.build-*")), "the build was not under way when it was killed"
    second = _load(cache)
    assert second.returncode == 0, second.stderr
    status, library = second.stdout.split("\n")[:2]
    assert status == "built" and Path(library).parent == cache / _key()
    assert "interrupted" in second.stderr and "building the native CPU attention kernel" in second.stderr
    assert not list(cache.glob("*.build-*")) and isinstance(check_library(cache / _key()), tuple)


# The rebuild's compiler stand-in for a child process: copies the session's verified library in as the
# compiler's output (the real compile is test_a_build_killed_at_any_moment_never_blocks_a_later_run's)
COPY_COMPILE = """
import shutil, sys, types
from pathlib import Path
from entropy_lens.kernels.native.build import build_extension
def compile(name, source, work):
    library = work / f"{name}.so"
    shutil.copyfile(sys.argv[2], library)
    print("compiled", file=sys.stderr)
    return types.SimpleNamespace(__file__=str(library), __name__=name)
print(build_extension(root=Path(sys.argv[1]), compile=compile).__file__)
"""


@pytest.mark.slow
def test_a_library_cut_short_is_rebuilt_not_loaded(valid_cache):
    """In a child process, so that loading the cut library (SIGBUS, -7, before the check) fails the test
    rather than the worker; the rebuild copies a good library in (a real compile is a minute)."""
    folder = valid_cache / _key()
    library = next(folder.glob("*.so"))
    good = library.read_bytes()
    library.write_bytes(good[: len(good) // 2])  # a full disk, a copy cut short
    assert "damaged library" in check_library(folder)
    source = valid_cache.parent / "good.so"
    source.write_bytes(good)
    run = subprocess.run(
        [sys.executable, "-c", COPY_COMPILE, str(valid_cache), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(PACKAGE)},
    )
    assert run.returncode == 0, run.stderr  # was -7 (SIGBUS) when the library was loaded unchecked
    assert "damaged library" in run.stderr and "compiled" in run.stderr
    assert Path(run.stdout.strip()).parent == folder and isinstance(check_library(folder), tuple)


def test_a_valid_build_loads_from_another_checkout_without_writing_to_the_cache(valid_cache, tmp_path):
    """Another checkout of the same source (another path) loads the same build: no rebuild, no line,
    nothing written, so a read-only cache works too."""
    other = tmp_path / "checkout"
    shutil.copytree(
        PACKAGE / "entropy_lens", other / "entropy_lens", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = _tree(valid_cache)
    if os.geteuid() != 0:  # root writes through permissions: the unchanged tree below is the check there
        for path in [valid_cache, *valid_cache.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
    try:
        run = _load(valid_cache, pythonpath=other, timeout=60)
    finally:
        for path in [valid_cache, *valid_cache.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
    assert run.returncode == 0, run.stderr
    status, library = run.stdout.split("\n")[:2]
    assert status == "built" and Path(library).parent == valid_cache / _key()
    assert "building" not in run.stderr and _tree(valid_cache) == before


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda folder: (folder / MANIFEST).unlink(), "without its manifest"),
        (lambda folder: (folder / MANIFEST).write_text("{"), "unreadable manifest"),
        (
            lambda folder: (folder / MANIFEST).write_text(
                json.dumps({"file": "../x.so", "module": "m", "bytes": 1, "sha256": ""})
            ),
            "outside",
        ),
        (
            lambda folder: next(folder.glob("*.so")).write_bytes(
                b"\0" * next(folder.glob("*.so")).stat().st_size
            ),
            "hash",
        ),
        (lambda folder: shutil.rmtree(folder), "no build yet"),
    ],
)
def test_check_library_says_why_a_build_is_not_used(valid_cache, damage, why):
    folder = valid_cache / _key()
    damage(folder)
    assert why in check_library(folder)


def test_a_kill_between_the_library_and_its_manifest_means_a_rebuild(valid_cache):
    """The library is moved in first and the manifest written last: a build killed between the two
    leaves a folder that the next run rebuilds (here through an injected compile, to stay fast)."""
    folder = valid_cache / _key()
    (folder / MANIFEST).unlink()
    compiled = []

    def compile(name, source, work):  # copies this session's library in as the compiler's output
        assert (
            source.read_bytes() == SOURCE.read_bytes() and source.parent == work
        )  # a copy, not the checkout's
        compiled.append(name)
        library = work / f"{name}.so"
        shutil.copyfile(next((cache_root() / _key()).glob("*.so")), library)
        return types.SimpleNamespace(__file__=str(library), __name__=name)

    build_extension(root=valid_cache, compile=compile)
    assert len(compiled) == 1 and not list(valid_cache.glob("*.build-*"))
    assert isinstance(check_library(folder), tuple)


def test_a_missing_compiler_is_named_in_the_status(tmp_path):
    run = _load(tmp_path / "cache", timeout=120, CXX="/nonexistent/c++")
    assert run.returncode == 0
    status = run.stdout.split("\n")[0]
    assert status.startswith("unavailable (") and "/nonexistent/c++: not found" in status, status


def test_failure_reason_quotes_the_telling_line_not_ninjas_command():
    command = "[1/2] c++ -MMD -MF x.o.d " + "-isystem /very/long/include/path " * 20
    err = RuntimeError(
        f"Error building extension 'x': {command}\nFAILED: x.o\n/bin/sh: 1: c++: not found\nninja: stopped\n"
    )
    assert failure_reason(err) == "RuntimeError: /bin/sh: 1: c++: not found"
    assert failure_reason(OSError("")) == "OSError"
    assert len(failure_reason(RuntimeError("x" * 5000))) < 320


def test_an_unwritable_cache_without_a_build_says_which_variable_to_set(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    state = NativeState(build=lambda: build_extension(root=blocked / "native"))
    assert native_module(state) is None
    assert "ENTROPY_LENS_NATIVE_CACHE" in native_status(state) and "cannot be written" in native_status(state)


def test_the_build_happens_before_auto_times_anything(monkeypatch):
    """`--fused auto` times real layers of each way; the build (tens of seconds) or the library's load
    must never fall inside a timed trial, or auto would keep the wrong path."""
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.capture.fused import PathChoices, wall_seconds

    events = []

    def build():
        events.append("build")
        return build_extension()

    def timer(fn):
        events.append("timing")
        result = wall_seconds(fn)
        events.append("timed")
        return result

    monkeypatch.setattr(
        native, "PROCESS_NATIVE", NativeState(build=build)
    )  # a process that has not built yet
    model, ids = make_tiny_model(n_layers=3), torch.randint(0, 64, (1, 24))
    with EntropyRecorder(model, fused="auto", choices=PathChoices(timer=timer)) as rec, torch.no_grad():
        model(ids)
    assert events[0] == "build" and events.count("build") == 1 and "timing" in events
    assert "native" in rec.session.paths
