"""Build, cache and load the native kernel's extension so that no cache state can stop a later run.

    module = build_extension()        # a verified cached build, else one fresh build (one line says so)

The cache (`cache_root()`, ENTROPY_LENS_NATIVE_CACHE) holds one folder per key, `<root>/<key>/`, with the
library and a manifest (`manifest.json`: its file name, module name, size and SHA-256). The key hashes
what the library depends on: the C++ source, the compiler flags, the torch version and install folder
and the Python ABI. Not the checkout's path: the source is copied into the build, so two checkouts of
the same source share one build, while two environments (another torch, another Python) each keep
their own and never rebuild each other's.

Loading: the manifest is read and the library's size and hash checked BEFORE it is loaded (a truncated
library, from a full disk or a copy cut short, would kill the process with SIGBUS when mapped); a
verified library is imported directly, with no compiler, ninja or lock involved, so a read-only cache
holding a valid build is used as it is.

Building (no verified library): under an flock on `<root>/<key>.lock`, which the kernel releases
when its holder dies however it dies (kill -9, a closed terminal), so a killed build never blocks a
later one. The holder removes what an interrupted build left (its `<key>.build-*` folders, said in one
line), compiles with torch's `cpp_extension.load` in a fresh `<key>.build-<random>` folder (so torch's
own `lock` file, which a killed build leaves behind and which makes every later torch build wait
forever, is never seen again), then moves the library into `<root>/<key>/` and writes the manifest
last, each by an atomic rename. A kill at any moment leaves either the previous state or an unverified
library, which the next run rebuilds, saying why.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

__all__ = ["build_extension", "cache_key", "cache_root", "check_library", "failure_reason"]

SOURCE = Path(__file__).with_name("attention_entropy.cpp")
CACHE_ENV = "ENTROPY_LENS_NATIVE_CACHE"  # where builds are kept (default ~/.cache/entropy_lens/native)
MANIFEST = "manifest.json"


def cpu_flags() -> list[str]:
    """Compiler flags for this CPU: AVX2 + FMA where torch reports them (the kernel's vector path),
    else none (its scalar loop, correct but slower)."""
    capability = torch.backends.cpu.get_cpu_capability()
    return ["-mavx2", "-mfma"] if capability in ("AVX2", "AVX512") else []


def compiler_flags() -> list[str]:
    # -fopenmp: at::parallel_for's OpenMP loop is inline in ATen's headers, serial without it; the
    # runtime it links (libgomp.so.1) is the one torch already loaded, so torch.set_num_threads applies
    return ["-O3", "-std=c++17", "-fopenmp", *cpu_flags()]


def cache_root() -> Path:
    # its own variable, not ENTROPY_LENS_CACHE (models, moved per test session): one build per version
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "entropy_lens" / "native"))


def cache_key(source: bytes, flags: list[str]) -> str:
    """What a build depends on, hashed: the source, the flags, this torch (version and folder) and this
    Python's ABI; never the path of the checkout that asks."""
    parts = [
        source,
        " ".join(flags).encode(),
        torch.__version__.encode(),
        str(Path(torch.__file__).resolve().parent).encode(),
        sys.implementation.cache_tag.encode(),
    ]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def check_library(folder: Path) -> tuple[Path, str] | str:
    """(library path, module name) where `folder`'s manifest names a library of exactly the recorded
    size and hash; else why not, in a few words. Reads only: never loads the library."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        name, module, size, digest = (manifest[k] for k in ("file", "module", "bytes", "sha256"))
    except FileNotFoundError:
        return "no build yet" if not folder.exists() else "a build without its manifest (interrupted)"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"an unreadable manifest ({type(err).__name__})"
    library = folder / str(name)
    if library.parent != folder or not re.fullmatch(r"[A-Za-z0-9_]+", str(module)):
        return "a manifest naming a file outside its folder"
    try:
        actual = library.stat().st_size
        if actual != size:
            return f"a damaged library ({actual} bytes, {size} expected)"
        if _sha256(library) != digest:
            return "a damaged library (its hash differs from the manifest's)"
    except OSError as err:
        return f"an unreadable library ({type(err).__name__})"
    return library, str(module)


def build_extension(*, root: Path | None = None, compile=None):
    """The extension's module: a verified cached build, else built once (see the module docstring).
    `compile(name, source, work) -> module` builds in the folder `work` (default: torch's `load`)."""
    flags = compiler_flags()
    source = SOURCE.read_bytes()
    key = cache_key(source, flags)
    root = cache_root() if root is None else Path(root)
    final = root / key
    found = check_library(final)
    if isinstance(found, tuple):
        return _import(*found)
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = os.open(root / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise OSError(
            f"the native kernel's cache {root} cannot be written ({err.strerror}); "
            f"set {CACHE_ENV} to a writable folder"
        ) from err
    try:
        _wait_for(lock, root / f"{key}.lock")
        found = check_library(final)  # another process may have built it while this one waited
        if isinstance(found, tuple):
            return _import(*found)
        _remove_interrupted(root, key)
        print(
            f"entropy_lens: building the native CPU attention kernel ({found}) for torch {torch.__version__}, "
            f"{sys.implementation.cache_tag}, flags {' '.join(flags)}: once, in {final}",
            file=sys.stderr,
            flush=True,
        )
        work = Path(tempfile.mkdtemp(prefix=f"{key}.build-", dir=root))
        try:
            (work / SOURCE.name).write_bytes(source)
            started = time.perf_counter()
            module = (compile or _compile)(f"entropy_lens_native_{key}", work / SOURCE.name, work)
            print(
                f"entropy_lens: built the native CPU attention kernel in {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            built = Path(module.__file__)
            final.mkdir(exist_ok=True)
            os.replace(built, final / built.name)  # the loaded library keeps its inode: still mapped
            module.__file__ = str(final / built.name)
            manifest = {
                "file": built.name,
                "module": module.__name__,
                "bytes": (final / built.name).stat().st_size,
                "sha256": _sha256(final / built.name),
                "torch": torch.__version__,
                "flags": flags,
            }
            _write_atomic(final / MANIFEST, json.dumps(manifest, indent=1) + "\n")
            return module
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        os.close(lock)  # releases the flock


def failure_reason(err: BaseException) -> str:
    """One line for a failed build or load: the compiler's or the shell's own line where there is one
    ("/bin/sh: 1: c++: not found", "error: ...", "No space left on device"), not ninja's long command."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    telling = re.compile(
        r"not found|error:|fatal|No space left|Permission denied|Killed|cannot", re.IGNORECASE
    )
    line = next((line for line in lines if telling.search(line)), lines[0] if lines else "")
    line = line if len(line) <= 300 else line[:299] + "…"
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def _compile(name: str, source: Path, work: Path):
    from torch.utils.cpp_extension import load

    path = os.environ.get("PATH", "")
    # a `pip install ninja` lands beside the interpreter, off PATH when the venv is not activated
    os.environ["PATH"] = os.pathsep.join([path, str(Path(sys.executable).parent)]).strip(os.pathsep)
    try:
        return load(
            name=name,
            sources=[str(source)],
            extra_cflags=compiler_flags(),
            extra_ldflags=["-fopenmp"],
            build_directory=str(work),
        )
    finally:
        os.environ["PATH"] = path


def _import(library: Path, module: str):
    spec = importlib.util.spec_from_file_location(module, library)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _wait_for(fd: int, path: Path) -> None:
    """Take the build lock, waiting (with one line) while another live process builds."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "holder unknown"
        print(
            f"entropy_lens: waiting for another process that is building the native kernel ({holder})",
            file=sys.stderr,
            flush=True,
        )
        fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)


def _remove_interrupted(root: Path, key: str) -> None:
    """Remove the folders of builds that were killed (the lock is held, so none is running)."""
    for folder in sorted(root.glob(f"{key}.build-*")):
        print(
            f"entropy_lens: removing {folder.name}, left by a native kernel build that was interrupted",
            file=sys.stderr,
            flush=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # a shared cache: readable by every user, as the library is
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
