"""Sweep folders: one ordinary results file per uniform scale, plus an index, `sweep.json`, written and read
here (`read_sweep_index` is the one reader of every index: fit, view, figures and sweep --resume)."""

from __future__ import annotations

import json
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.files import atomic_write_text, is_integer, is_number, kind_of, printable, shown
from entropy_lens.results.schema import READABLE_VERSIONS, upgrade_meta

__all__ = ["SWEEP_INDEX", "SWEEP_KIND", "read_sweep_index", "write_sweep_index"]

SWEEP_INDEX = "sweep.json"
SWEEP_KIND = "entropy_lens.sweep"
INDEX_VERSION = 1  # schema version 2 added row statistics to results files; the index is as in version 1


def write_sweep_index(folder: str | Path, index: dict) -> Path:
    """Write `folder/sweep.json` atomically. `index` holds at least `scales` (ascending multipliers s)
    and `files` (results file names inside `folder`, same order; a scale whose scan has not finished
    is absent from both), plus `model`, `length`, `data`, `samples`, `seed`, `entropy` (the sweep's
    --record: "heads", "mean" or "none"), `requested_scales` and `complete` (every requested scale
    done)."""
    path = Path(folder) / SWEEP_INDEX
    record = {"kind": SWEEP_KIND, "schema_version": INDEX_VERSION, **index}
    return atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def read_sweep_index(folder: str | Path) -> dict:
    """`folder/sweep.json` as a dict, checked; file names are made absolute paths under `files`.

    The index is untrusted (a sweep folder is copied and shared), and this is the one reader of it, for
    `fit`, `view`, `figures` and `sweep --resume` alike: it must be a JSON object whose `scales` and
    `requested_scales` are finite numbers, `complete` a boolean, `length` an integer, and `files` names
    of files inside `folder`: no absolute path, no `..`, no symlink (nor `sweep.json` itself) that
    resolves outside it. Anything else is refused in one line."""
    folder = Path(folder)
    path = folder / SWEEP_INDEX
    if not path.is_file():
        what = "does not exist" if not folder.exists() else f"has no {SWEEP_INDEX}"
        raise EntropyLensError(
            f"sweep folder {printable(folder)} {what}; make it with `entropy-lens sweep CKPT --out "
            f"{printable(folder)}`"
        )
    rebuild = "rerun the sweep with --resume, which rebuilds it from the folder's scale files"
    _inside(folder, SWEEP_INDEX)
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: nesting too deep
        raise EntropyLensError(
            f"{printable(path)} is not readable JSON ({printable(err)}); {rebuild}"
        ) from None
    if not isinstance(index, dict):
        raise EntropyLensError(
            f"{printable(path)} holds {kind_of(index)}, not a sweep index (a JSON object); {rebuild}"
        )
    index = upgrade_meta(index)  # an index written before the glossary's names says `len`
    version = index.get("schema_version")
    if index.get("kind") != SWEEP_KIND or not is_integer(version) or version not in READABLE_VERSIONS:
        raise EntropyLensError(
            f"{printable(path)} is not an entropy-lens sweep index (kind {SWEEP_KIND}, schema {' or '.join(map(str, READABLE_VERSIONS))}); rerun the sweep"
        )
    bad = lambda key, want: EntropyLensError(
        f"{printable(path)}: {key} must be {want}, not {shown(index[key])}; {rebuild}"
    )
    for key in ("scales", "files"):
        if key not in index:
            raise EntropyLensError(f"{printable(path)} lacks {key}; {rebuild}")
    for key in ("scales", "requested_scales"):
        values = index.get(key)
        if (key == "scales" or values is not None) and not (
            isinstance(values, list) and all(is_number(v) for v in values)
        ):
            raise bad(key, "a list of finite numbers")
    if not isinstance(index.get("complete", True), bool):
        raise bad("complete", "true or false")
    if "length" in index and not is_integer(index["length"]):
        raise bad("length", "an integer")
    if not isinstance(index.get("scan_config", {}), dict):
        raise bad("scan_config", "an object of the scan's settings")
    names = index["files"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("files", f"a list of names of files inside {printable(folder)}")
    if len(index["scales"]) != len(names):
        raise EntropyLensError(f"{printable(path)}: scales and files differ in length; {rebuild}")
    index["files"] = [str(_inside(folder, name)) for name in names]
    return index


def _inside(folder: Path, name: str) -> Path:
    """`folder / name`, refused unless `name` is a plain relative name that stays inside `folder` with
    every symlink resolved."""
    path = folder / name
    plain = bool(name) and "\0" not in name and not Path(name).is_absolute() and ".." not in Path(name).parts
    try:
        if plain and path.resolve().is_relative_to(folder.resolve()):
            return path
    except (OSError, RuntimeError):  # a symlink loop: not a file inside the folder either
        pass
    how = " (through a symlink)" if plain else ""
    raise EntropyLensError(
        f"{printable(folder / SWEEP_INDEX)} lists {printable(repr(name))}, which lies outside the sweep "
        f"folder{how}; a sweep reads only the files inside its folder: copy that file into the folder and "
        "list it by its name there, or rerun the sweep with --resume, which rebuilds the index"
    )
