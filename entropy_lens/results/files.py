"""Writing files atomically, and quoting in messages what files hold.

Files are written atomically (temporary file in the same folder, then os.replace): a reader sees the old
file or the new one, never half of one. Because a rename replaces whatever stands at the path (as root, a
device such as /dev/null), every writer first refuses a target that is not a regular file
(`check_regular_target`, also the commands' up-front output check), and a write the system refuses (disk
full, read-only, no permission) is one line (`WriteFailed`). Files are untrusted: a value one holds is quoted in a message only
through `printable` (or `shown`, its repr), which drops the control characters that would make a
terminal act instead of print.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import stat
import zipfile
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError

__all__ = [
    "WriteFailed",
    "atomic_savez",
    "atomic_write_text",
    "beside_record",
    "check_regular_source",
    "check_regular_target",
    "is_integer",
    "is_number",
    "kind_of",
    "meta_schema",
    "npz_holds",
    "printable",
    "read_npz",
    "recorded_file",
    "shown",
    "write_failure_reason",
]


# C0 and C1 controls (escape sequences, carriage return, newlines) and the invisible marks that reorder
# or hide text (bidi overrides and isolates, U+2028/9): a terminal acts on them instead of showing them
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(value) -> str:
    """`value` as text safe to quote in a message: what a file supplies (a name, a meta value, a
    command) printed as it is could rewrite the terminal (`\\x1b[2K\\r`) or fake a second line, so
    control characters are dropped, and a lone surrogate (JSON's `\\ud800`) becomes U+FFFD."""
    text = value if isinstance(value, str) else str(value)
    return _CONTROL.sub("", text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


def is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def kind_of(value) -> str:
    return {str: "a string", bool: "a boolean", float: "a float", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def shown(value, most: int = 60) -> str:
    """repr(`value`), made printable and cut to `most` characters: a file's value quoted in a message."""
    text = printable(repr(value))
    return text if len(text) <= most else text[: most - 3] + "..."


# what stands at a path, by its type (stat.S_IFMT), in words
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFREG: "a file",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
}


def check_regular_target(
    path: str | Path, *, flag: str | None = None, folder: bool = False, example: str = "x.npz"
) -> Path:
    """Refuse, in one line and before any work, a target that exists and is not what a writer may replace:
    a regular file (`folder`: a folder). A symlink is judged by what it resolves to (a link to /dev/null is
    a device). `flag` names the option in the message (e.g. "--out"); `example` is the file name suggested
    inside a folder given for a file."""
    if not str(path):
        raise EntropyLensError(f"{flag or 'the path'} is empty; pass a file name, such as {example}")
    path = Path(path)
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)  # follows symlinks
    except OSError:  # nothing there (a dangling link is written through), or no way to look: the write says
        return path
    if kind == (stat.S_IFDIR if folder else stat.S_IFREG):
        return path
    name = " ".join(filter(None, [flag, printable(path)]))
    if path.is_symlink():
        name += f" (a link to {printable(os.path.realpath(path))})"
    what = _KINDS.get(kind, "a special file")
    if kind == stat.S_IFDIR:
        message = f"{name} is a folder; pass a file name inside it, such as {path / example}"
    elif folder:
        message = f"{name} is {what}, not a folder; pass a folder (new or existing)"
    else:
        message = (
            f"{name} is {what}, not a regular file, and writing would replace it; move it away, or pass "
            f"another {flag or 'path'}"
        )
    raise TargetRefused(path, message, f"{what} stands there")


def check_regular_source(path: str | Path, *, label: str, fix: str) -> Path:
    """Refuse, in one line, a file to read that is not a regular file: '<label>: no such file; <fix>', or
    what stands there instead (a folder, a device, a FIFO, which a read would block on). A symlink is
    judged by what it resolves to.

    Args:
        path: the file to read.
        label: how the message names it ("--prompt-file notes", the path itself).
        fix: what to do instead ("pass a text file").

    Returns:
        Path: `path`.
    """
    path = Path(path)
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)  # follows symlinks
    except FileNotFoundError:
        raise EntropyLensError(f"{printable(label)}: no such file; {fix}") from None
    except OSError as err:
        raise EntropyLensError(f"{printable(label)}: cannot read it ({err.strerror or err}); {fix}") from None
    if kind != stat.S_IFREG:
        raise EntropyLensError(
            f"{printable(label)} is {_KINDS.get(kind, 'a special file')}, not a file; {fix}"
        )
    return path


class WriteFailed(EntropyLensError):
    """A write the system refused (disk full, read-only, no permission, no such place), in one line naming
    the file; `error` is the OSError (a run's rescue of its finished work reads the reason from it)."""

    def __init__(self, path: Path, error: OSError):
        self.error = error
        super().__init__(
            f"could not write {printable(path)} ({write_failure_reason(error)}); free space on that disk, "
            "make the folder writable, or pass another path"
        )


class TargetRefused(WriteFailed):
    """A target that is not what a writer may replace (check_regular_target), in one line; a WriteFailed,
    so that a run whose output turned into a folder or a device while it ran keeps its finished work as
    for any refused write (its checkpoint, or a rescued copy), `error` saying what stands there."""

    def __init__(self, path: Path, message: str, what: str):
        self.error = OSError(errno.EEXIST, what)
        EntropyLensError.__init__(self, message)


def write_failure_reason(error: OSError | WriteFailed) -> str:
    """The system's words for why a write failed ("No space left on device")."""
    error = error.error if isinstance(error, WriteFailed) else error
    return error.strerror or str(error)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically (see atomic_savez)."""
    return _atomic_write(_target(path), text.encode())


def atomic_savez(path: str | Path, **arrays) -> Path:
    """np.savez to `path` atomically (write a sibling temporary file, fsync, os.replace). A target that is
    not a regular file is refused before anything is written (`check_regular_target`); a write the system
    refuses is a `WriteFailed`."""
    path = _target(path)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return _atomic_write(path, buf.getbuffer())


def _target(path: str | Path) -> Path:
    """What an atomic write replaces: the file a symlink points to (written through, as the output lock
    does; the link is never replaced), which must be a regular file or nothing."""
    path = check_regular_target(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _atomic_write(path: Path, data) -> Path:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        raise WriteFailed(path, err) from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # the folder cannot be listed or is gone: nothing of ours is left in it
            pass
    return path


def npz_holds(path: str | Path, names, *, first: str | None = None) -> bool:
    """Whether `path` is a zip archive (an .npz) whose members include an array of each of `names`: how a
    writer recognises its own file (a results file, a checkpoint) before repairing or replacing it,
    without reading the arrays. An archive cut short (no central directory left) is recognised by its
    first member's name, `first` (the array an atomic_savez of that kind writes first). False for
    anything else (text, another program's arrays), which is kept."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = set(archive.namelist())
    except (OSError, ValueError):
        return False
    except zipfile.BadZipFile:
        return first is not None and _first_member(path) == f"{first}.npy"
    return all(f"{name}.npy" in members for name in names)


def _first_member(path: str | Path) -> str | None:
    """The name in a zip archive's first local file header (signature PK\\3\\4; the name's length at
    bytes 26-27, the name from byte 30), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
    except OSError:
        return None
    if not head.startswith(b"PK\x03\x04") or len(head) < 30:
        return None
    size = int.from_bytes(head[26:28], "little")
    return head[30 : 30 + size].decode("utf-8", "replace")


def read_npz(path: Path, *, what: str, again: str, keys=None) -> dict[str, np.ndarray]:
    """Every array of the .npz at `path` (or those of `keys` it holds, the others left unread), never
    unpickled; EntropyLensError in one line naming it `what` (e.g. "results file") and `again` (how to
    make it again) when it is not a readable .npz."""
    from entropy_lens.errors import first_line

    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files if keys is None or k in keys}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # truncated or foreign file
        # numpy reads a file that is neither .npy nor .npz as a pickle, and says allow_pickle would load
        # it: never the fix here (a pickle runs code)
        why = "not an .npz file" if "pickle" in str(err) else printable(first_line(err))
        raise EntropyLensError(f"{printable(path)} is not a readable {what} ({why}); {again}") from None


def meta_schema(path: str | Path, *, what: str, again: str) -> str | None:
    """The `schema` of the JSON meta of the .npz at `path` (a monitor history's, a generation's), None
    where it has none (a scan's results file) or no JSON meta; only the meta is read. A file that is not
    a readable .npz is refused by `read_npz` in one EntropyLensError naming it `what`, with `again`."""
    data = read_npz(Path(path), what=what, again=again, keys=("meta",))
    try:
        meta = json.loads(str(data["meta"])) if "meta" in data else None
    except (ValueError, RecursionError):  # not JSON: no schema (a results reader says what it is)
        return None
    schema = meta.get("schema") if isinstance(meta, dict) else None
    return schema if isinstance(schema, str) else None


def beside_record(file: str | Path, record: str | Path) -> str:
    """`file` (a checkpoint folder, a --head-scales file) as the output at `record` names it: relative to
    the record's folder, so a record moved or committed with the files it names holds no machine's path,
    and the same on whatever folder the command ran from (absolute only where no relative path leads
    there: another drive). `recorded_file` reads it back."""
    absolute = Path(file).resolve()
    try:
        return os.path.relpath(absolute, Path(record).resolve().parent)
    except ValueError:  # another drive
        return str(absolute)


def recorded_file(value: str | Path, record: str | Path) -> Path:
    """The file a record at `record` names as `value` (`beside_record`'s, or an absolute path as older
    records hold), as an absolute path: relative values are read from the record's folder."""
    return (Path(record).resolve().parent / value).resolve()
