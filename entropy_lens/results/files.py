"""Writing files atomically, and quoting in messages what files hold.

Files are written atomically (temporary file in the same folder, then os.replace): a reader sees the old
file or the new one, never half of one. Files are untrusted: a value one holds is quoted in a message only
through `printable` (or `shown`, its repr), which drops the control characters that would make a
terminal act instead of print.
"""

from __future__ import annotations

import io
import math
import os
import re
import zipfile
from pathlib import Path

import numpy as np

__all__ = [
    "atomic_savez",
    "atomic_write_text",
    "is_integer",
    "is_number",
    "kind_of",
    "printable",
    "read_npz",
    "shown",
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


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically (see atomic_savez)."""
    return _atomic_write(Path(path), text.encode())


def atomic_savez(path: str | Path, **arrays) -> Path:
    """np.savez to `path` atomically (write a sibling temporary file, fsync, os.replace)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return _atomic_write(Path(path), buf.getbuffer())


def _atomic_write(path: Path, data) -> Path:
    if path.is_symlink():  # write through the link to its file, as the output lock does; never replace it
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_npz(path: Path, *, what: str, again: str, keys=None) -> dict[str, np.ndarray]:
    """Every array of the .npz at `path` (or those of `keys` it holds, the others left unread), never
    unpickled; EntropyLensError in one line naming it `what` (e.g. "results file") and `again` (how to
    make it again) when it is not a readable .npz."""
    from entropy_lens.errors import EntropyLensError, first_line

    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files if keys is None or k in keys}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # truncated or foreign file
        # numpy reads a file that is neither .npy nor .npz as a pickle, and says allow_pickle would load
        # it: never the fix here (a pickle runs code)
        why = "not an .npz file" if "pickle" in str(err) else printable(first_line(err))
        raise EntropyLensError(f"{printable(path)} is not a readable {what} ({why}); {again}") from None
