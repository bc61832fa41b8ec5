"""The native kernel's build cache as users break it: a build killed at any moment, a library cut
short, two checkouts sharing one cache, a read-only cache, a compiler that is missing. Real processes,
real signals, real files; each case would hang, crash or rebuild silently before build.py."""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import torch
from tiny import make_tiny_model

from entropy_lens.kernels import native
from entropy_lens.kernels.native import NativeState, native_available, native_module, native_status
from entropy_lens.kernels.native import build as native_build
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


# The kill tests' source, in place of build.SOURCE: a module with nothing in it, built by build.py's own
# compile (torch's cpp_extension, ninja, the compiler, the link) in a second, where the kernel's source
# takes a minute or two
EMPTY_MODULE = r"""
#include <Python.h>
#define JOIN2(a, b) a##b
#define JOIN(a, b) JOIN2(a, b)
#define NAME2(a) #a
#define NAME(a) NAME2(a)
static struct PyModuleDef empty = {PyModuleDef_HEAD_INIT, NAME(TORCH_EXTENSION_NAME), nullptr, -1, nullptr};
PyMODINIT_FUNC JOIN(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&empty); }
"""

# A build in a child process that stops at one moment (argv: cache, moment, mark file, source file) and
# writes the mark there, for the test to kill it: build.py's steps in order, each observed through the
# function it calls next
KILLED_BUILD = """
import os, shutil, sys, time
from pathlib import Path
from entropy_lens.kernels.native import build
root, moment, mark, build.SOURCE = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])

def stop(at):
    if at == moment:
        mark.write_text(at)
        time.sleep(600)

wait_for, compile, write_atomic = build._wait_for, build._compile, build._write_atomic
replace, rmtree = os.replace, shutil.rmtree

def locked(fd, path):
    wait_for(fd, path)
    stop("lock taken")

def compiling(name, source, work):
    stop("source copied")
    module = compile(name, source, work)
    stop("compiled")
    return module

def manifest_next(path, text):
    stop("library moved in")
    write_atomic(path, text)

def renaming(src, dst):
    if Path(dst).name == build.MANIFEST:
        stop("manifest written, not renamed")
    replace(src, dst)

def cleaning(path, *args, **kwargs):
    if (Path(path).parent / Path(path).name.split(".build-")[0] / build.MANIFEST).exists():
        stop("manifest renamed")
    rmtree(path, *args, **kwargs)

build._wait_for, build._compile, build._write_atomic = locked, compiling, manifest_next
os.replace, shutil.rmtree = renaming, cleaning
build.build_extension(root=root)
"""

# The compiler ninja runs for the object file, for the moment "compiler running": marks it, compiles,
# then stays on as a long compile does
STOPPING_CXX = """#!/bin/sh
for arg in "$@"; do
  if [ "$arg" = -c ]; then touch "$KILL_MARK"; "$REAL_CXX" "$@"; exec sleep 600; fi
done
exec "$REAL_CXX" "$@"
"""

# Each moment a build can be killed at, in build.py's order, and why the later run builds (check_library's
# words), or None where it finds the build finished
KILL_MOMENTS = {
    "lock taken": "no build yet",
    "source copied": "no build yet",
    "compiler running": "no build yet",
    "compiled": "no build yet",
    "library moved in": "a build without its manifest (interrupted)",
    "manifest written, not renamed": "a build without its manifest (interrupted)",
    "manifest renamed": None,
}


def _session(sid: int) -> list[int]:
    """The live processes of session `sid` (zombies left out)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(stat.parent.name))
    return found


def _kill_session(leader: subprocess.Popen) -> None:
    """SIGKILL to every process of `leader`'s session (started with start_new_session): the build, ninja,
    and the compiler, which ninja starts in a process group of its own, so a killpg alone misses it."""
    for _ in range(100):
        left = _session(leader.pid)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    leader.wait()
    assert not _session(leader.pid), "the killed build's processes outlived SIGKILL"


def _kill_at(moment: str, cache: Path, source: Path, tmp_path: Path) -> None:
    """A build of `source` into `cache` in a child process, SIGKILLed with all it started at `moment`."""
    mark = tmp_path / "stopped"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE)}
    if moment == "compiler running":
        cxx = tmp_path / "bin" / "c++"
        cxx.parent.mkdir()
        cxx.write_text(STOPPING_CXX)
        cxx.chmod(0o755)
        env |= {"CXX": str(cxx), "REAL_CXX": os.environ.get("CXX", "c++"), "KILL_MARK": str(mark)}
    log = tmp_path / "killed.log"
    with log.open("w") as out:
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_BUILD, str(cache), moment, str(mark), str(source)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 120
    while not mark.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    _kill_session(child)
    assert mark.exists(), f"the build never reached {moment!r}:\n{log.read_text()[-3000:]}"


def _build_within(seconds: float, **kwargs):
    """build_extension(**kwargs) in a thread, failing the test where it has not returned in `seconds`
    (a later run blocked by a killed one would wait forever)."""
    result = {}

    def build():
        try:
            result["module"] = build_extension(**kwargs)
        except BaseException as err:  # noqa: BLE001 - raised again below, in the test's thread
            result["error"] = err

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the later build still waits after {seconds} s"
    if "error" in result:
        raise result["error"]
    return result["module"]


@pytest.mark.slow
@pytest.mark.parametrize("moment", list(KILL_MOMENTS))
def test_a_build_killed_at_any_moment_never_blocks_a_later_run(tmp_path, capsys, monkeypatch, moment):
    """A build SIGKILLed with all it started (ninja, the compiler) at each of its steps, then a later
    build into the same cache: it takes the lock at once, removes what the killed one left (and, at the
    first step, a folder an earlier killed build left), builds and verifies, or finds the finished build
    and loads it as it is. The builds compile EMPTY_MODULE (the kernel's own compile killed and redone:
    test_a_build_killed_in_the_kernels_compile_never_blocks_its_rebuild, make test-full)."""
    cache, source = tmp_path / "cache", tmp_path / "empty_module.cpp"
    source.write_text(EMPTY_MODULE)
    key = cache_key(source.read_bytes(), compiler_flags())
    if moment == "lock taken":
        earlier = cache / f"{key}.build-earlier"
        earlier.mkdir(parents=True)
        (earlier / "lock").touch()  # torch's own lock file, which a killed torch build leaves behind
    _kill_at(moment, cache, source, tmp_path)
    lock = os.open(cache / f"{key}.lock", os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the killed holder's flock went with it
    finally:
        os.close(lock)
    monkeypatch.setattr(native_build, "SOURCE", source)
    module = _build_within(120, root=cache)
    said = capsys.readouterr().err
    assert Path(module.__file__).parent == cache / key and isinstance(check_library(cache / key), tuple)
    why = KILL_MOMENTS[moment]
    if why is None:
        assert "building" not in said, said
    else:
        assert f"building the native CPU attention kernel ({why})" in said, said
        assert "left by a native kernel build that was interrupted" in said, said
        assert not list(cache.glob("*.build-*"))


@pytest.mark.full
@pytest.mark.slow
def test_a_build_killed_in_the_kernels_compile_never_blocks_its_rebuild(tmp_path):
    """The kernel's own source: its compile killed a second in, the later run (a new process, as a user's)
    compiles it for real. The exhaustive form of test_a_build_killed_at_any_moment_never_blocks_a_later_run
    (every step, an empty module's compile): a minute or two of compiling."""
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
    _kill_session(first)  # the compiler and ninja with it
    assert list(cache.glob("*.build-*")), "the build was not under way when it was killed"
    second = _load(cache)
    assert second.returncode == 0, second.stderr
    status, library = second.stdout.split("\n")[:2]
    assert status == "built" and Path(library).parent == cache / _key()
    assert "interrupted" in second.stderr and "building the native CPU attention kernel" in second.stderr
    assert not list(cache.glob("*.build-*")) and isinstance(check_library(cache / _key()), tuple)


# The rebuild's compiler stand-in for a child process: copies the session's verified library in as the
# compiler's output (the kernel's real compile is under make test-full:
# test_a_build_killed_in_the_kernels_compile_never_blocks_its_rebuild)
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


@pytest.mark.slow
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
