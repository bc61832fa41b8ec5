"""One writer per output: `OutputLock`, an exclusive lock held for a whole run.

    with OutputLock(Path("results/x.npz"), flag="--out"):        # results/x.npz.lock
        ...
    with OutputLock(Path("sweeps/nope"), folder=True):           # sweeps/nope/.entropy-lens.lock
        ...

The lock is `fcntl.flock` on a small file that names its holder (pid, host, start time, command
line). The kernel releases a flock when its process ends, however it ends (kill -9 included), so a
lock file left by a killed run is found unlocked: the next run takes it over and says whose it was.
A second run while the first is alive is refused at once, in one line naming the first. The file is
removed on exit; because a waiting run may have opened it just before, a run that wins the lock
checks that the file it locked is still the one at the path (else it retries).

The lock lives beside what `target` resolves to, so a symlink to another run's output shares that
run's lock. A lock that cannot be written (a full disk, a read-only folder) is one line, and the file
this run made for it is removed.

flock is advisory and per machine: two runs on different hosts writing one network folder are not
kept apart (the holder's host is written in the file for that reason).
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Self

from entropy_lens.errors import EntropyLensError

__all__ = ["FOLDER_LOCK", "OutputLock", "lock_path"]

FOLDER_LOCK = ".entropy-lens.lock"  # the lock file inside a folder output (sweep, figures, model)


def lock_path(target: Path, *, folder: bool = False) -> Path:
    """Where the lock of `target` lives: `<file>.lock` beside a file, `<folder>/.entropy-lens.lock`."""
    return target / FOLDER_LOCK if folder else target.with_name(target.name + ".lock")


class OutputLock:
    """Hold the lock of `target` for the block; `flag` names the option in messages (e.g. --out)."""

    def __init__(self, target: str | Path, *, folder: bool = False, flag: str = "--out"):
        self.target, self.folder, self.flag = Path(target), folder, flag
        # realpath: a symlink to another run's output locks that output, not a lock of its own
        self.path = lock_path(Path(os.path.realpath(self.target)), folder=folder)
        self._fd: int | None = None

    def __enter__(self) -> Self:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._locked()
        except OSError as err:
            raise self._unwritable(err) from None
        previous = _read(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder().encode(), 0)
        except OSError as err:  # no space for its few bytes: nothing of this run may stay behind
            self.path.unlink(missing_ok=True)
            os.close(fd)
            raise self._unwritable(err) from None
        if previous:
            print(
                f"entropy-lens: {self.target}: taking over the lock of an earlier run that is no longer "
                f"running ({previous})",
                file=sys.stderr,
                flush=True,
            )
        self._fd = fd
        return self

    def _unwritable(self, err: OSError) -> EntropyLensError:
        return EntropyLensError(
            f"the lock {self.path} cannot be written ({err.strerror or err}); free space on that disk or "
            f"make the folder writable, or pass another {self.flag}"
        )

    def _locked(self) -> int:
        """An fd of the lock file, flocked by this process (or EntropyLensError naming the holder)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise EntropyLensError(
                    f"{self.target} is being written by another run ({holder or 'holder unknown'}); "
                    f"wait for it to finish, or pass another {self.flag}"
                ) from None
            if _same_file(fd, self.path):
                return fd
            os.close(fd)  # the previous holder removed the file between our open and our lock: again

    def __exit__(self, *exc) -> bool:
        if self._fd is not None:
            if _same_file(self._fd, self.path):
                self.path.unlink(missing_ok=True)
            os.close(self._fd)  # releases the flock
            self._fd = None
        return False


def _holder() -> str:
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
    return f"pid {os.getpid()} on {socket.gethostname()}, started {started}: {command}"


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except OSError:  # removed, or a folder above it replaced
        return False
