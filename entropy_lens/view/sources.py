"""What a view shows, resolved from what the user names: results files, sweep folders, or objects.

    items = resolve(["nope.npz", "rope.npz", "sw/nope"])      # paths, as `entropy-lens view` takes them
    items = resolve([("NoPE", nope), ("λ(h)", heads)])        # (label, ScanResult) pairs from Python

A sweep folder gives a `SweepItem` (loss by position × scale, the fit) and, when its scale files hold
entropy, two of its scans as ordinary results for the head explorer: the scale nearest 1 (the model as
trained) and s*, the uniform scale of lowest loss over the last L/2 positions (`analysis.best_uniform_scale`).

Files are untrusted (a page made of them is shared): every results file is checked before anything is drawn
(`check_result`: array shapes and types, meta `scales`), and a sweep folder's `sweep.json` may name only
files inside the folder, symlinks resolved (`sweep_files`), so a page never embeds a file from elsewhere.
A file that fails a check is refused in one line that names it, what is wrong and the fix.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from entropy_lens.analysis import Sweep, best_uniform_scale, load_sweep
from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.results import SWEEP_INDEX, ScanResult, read_sweep_index

__all__ = ["ResultItem", "SweepItem", "check_result", "load_result", "resolve", "sweep_files"]

ARRAY_DIMS = {"entropy": 3, "entropy_sq": 3, "loss": 1, "loss_sq": 1, "count": 1}  # a results file's arrays
_SHAPES = {3: "(layers, heads, positions)", 1: "(positions,)"}
RESCAN = "rerun the scan that made it (entropy-lens scan), or leave the file out"


@dataclass
class ResultItem:
    label: str
    result: ScanResult
    source: str  # the file it came from, or "(in memory)"


@dataclass
class SweepItem:
    label: str
    sweep: Sweep
    source: str


def resolve(items, labels=None) -> tuple[list[ResultItem], list[SweepItem]]:
    """Results and sweeps from paths (`.npz` or sweep folder), `ScanResult`s, `Sweep`s or (label, any of
    those) pairs; `labels` names them in order (default: file names, "result 1", ...)."""
    if isinstance(items, (str, Path, ScanResult, Sweep, tuple)):
        items = [items]
    items = list(items)
    if not items:
        raise EntropyLensError("nothing to view; pass a results .npz or a sweep folder")
    if labels is not None and len(labels) != len(items):
        raise EntropyLensError(
            f"{len(labels)} labels for {len(items)} results; pass one label per result (or none)"
        )
    results, sweeps = [], []
    for i, item in enumerate(items):
        label = labels[i] if labels is not None else None
        if isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], str):
                raise EntropyLensError("pass (label, result) pairs, e.g. [('NoPE', nope), ('RoPE', rope)]")
            label, item = label or item[0], item[1]
        if isinstance(item, ScanResult):
            check_result(item, label or f"result {i + 1}")
            results.append(ResultItem(label or f"result {i + 1}", item, "(in memory)"))
        elif isinstance(item, Sweep):
            sweeps.append(SweepItem(label or f"sweep {i + 1}", item, "(in memory)"))
        elif isinstance(item, (str, Path)):
            path = Path(item)
            if path.is_dir():
                found, sweep = _sweep_folder(path, label or path.name)
                results += found
                sweeps.append(sweep)
            elif path.suffix == ".npz" or path.is_file():
                results.append(ResultItem(label or path.stem, load_result(path), str(path)))
            else:
                raise EntropyLensError(
                    f"{path} does not exist; pass a results .npz (entropy-lens scan) or a sweep folder "
                    "(entropy-lens sweep)"
                )
        else:
            raise EntropyLensError(
                f"cannot view a {type(item).__name__}; pass ScanResult, Sweep, a path, or (label, one of these)"
            )
    _unique_labels(results)
    _unique_labels(sweeps)
    return results, sweeps


def load_result(path: str | Path) -> ScanResult:
    """`ScanResult.load(path)`, checked by `check_result`; any malformed content is one EntropyLensError."""
    try:
        result = ScanResult.load(path)
    except EntropyLensError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as err:  # e.g. a 2-D entropy array
        raise EntropyLensError(
            f"{path} is not a readable results file ({_why(path, err)}); {RESCAN}"
        ) from None
    check_result(result, str(path))
    return result


def _why(path, err: Exception) -> str:
    """What ScanResult.load tripped on: an array of the wrong shape, or the exception's first line."""
    with np.load(path, allow_pickle=False) as z:  # load read it: the trouble was in what it holds
        for name, ndim in ARRAY_DIMS.items():
            if name in z.files and z[name].ndim != ndim:
                return f"{name} has shape {z[name].shape}, not {_SHAPES[ndim]}"
    return first_line(err)


def check_result(result: ScanResult, source: str) -> None:
    """Refuse, in one line naming `source`, a result the page cannot draw: arrays (row statistics too)
    that are not real numbers of shapes (layers, heads, T) and (T,), sample counts that are not finite,
    or meta `scales` that is not a table of numbers. NaN/inf statistics or loss are allowed: the page
    draws them as gaps."""
    for name, ndim in ARRAY_DIMS.items():
        a = np.asarray(getattr(result, name))
        if a.dtype.kind not in "iuf" or a.ndim != ndim:
            raise EntropyLensError(
                f"{source}: {name} is {a.dtype} of shape {a.shape}, not real numbers of shape "
                f"{_SHAPES[ndim]}; {RESCAN}"
            )
    for name, a in result.stats.items():  # the row statistics of --stats, and sink_mass
        if np.asarray(a).dtype.kind not in "iuf":
            raise EntropyLensError(f"{source}: {name} is {np.asarray(a).dtype}, not real numbers; {RESCAN}")
    try:
        result.validate(source=source)
    except (ValueError, TypeError) as err:
        raise EntropyLensError(f"{source}: {first_line(err)}") from None
    if not np.all(np.isfinite(result.count)):
        raise EntropyLensError(f"{source}: count (samples per position) holds NaN/inf; {RESCAN}")
    scales = result.meta.get("scales")
    try:
        table = np.asarray(scales, dtype=np.float64)
    except (ValueError, TypeError):
        table = None
    if scales is not None and (table is None or isinstance(scales, (str, bytes))):
        raise EntropyLensError(
            f"{source}: meta scales {_short(scales)} is not a table of numbers ([layers][heads] multipliers "
            f"of 1/√d); {RESCAN}"
        )


def sweep_files(folder: Path) -> dict[float, str]:
    """{scale: path} of the files `folder/sweep.json` lists, each checked to lie inside `folder` (symlinks
    resolved) and each scale to be a finite number."""
    home = folder.resolve()
    index_path = folder / SWEEP_INDEX
    _inside(home, index_path, SWEEP_INDEX, folder)
    try:
        raw = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raw = None  # read_sweep_index says what is wrong and how to rebuild it
    if isinstance(raw, dict):
        for key in ("scales", "requested_scales"):
            values = raw.get(key) or []
            bad = [v for v in values if not _number(v)] if isinstance(values, list) else [values]
            if bad:
                raise EntropyLensError(
                    f"{index_path}: {key} holds {_short(bad[0])}, not a finite number; rerun the sweep "
                    "into a fresh folder (entropy-lens sweep), or fix the list by hand"
                )
        names = raw.get("files")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise EntropyLensError(
                f"{index_path}: files must be a list of file names inside {folder}; rerun the sweep into a "
                "fresh folder (entropy-lens sweep)"
            )
    index = read_sweep_index(folder)
    for name, path in zip(raw["files"] if isinstance(raw, dict) else index["files"], index["files"]):
        _inside(home, Path(path), name, folder)
    return dict(zip((float(s) for s in index["scales"]), index["files"]))


def _inside(home: Path, path: Path, name: str, folder: Path) -> None:
    if not path.resolve().is_relative_to(home):
        plain = Path(os.path.normpath(path.absolute())).is_relative_to(os.path.normpath(folder.absolute()))
        how = " (through a symlink)" if plain else ""
        raise EntropyLensError(
            f"{folder}/{SWEEP_INDEX} lists {name!r}, which lies outside the sweep folder{how}; view reads "
            "only the files inside a sweep folder: copy that file into the folder and list it by its name "
            "there, or view it on its own (entropy-lens view FILE)"
        )


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _short(value, most: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def _sweep_folder(folder: Path, label: str) -> tuple[list[ResultItem], SweepItem]:
    if not (folder / SWEEP_INDEX).is_file():
        raise EntropyLensError(
            f"{folder} is a folder without {SWEEP_INDEX}; pass a results .npz or a folder written by "
            "`entropy-lens sweep`"
        )
    files = sweep_files(folder)
    try:
        sweep = load_sweep(folder)
    except EntropyLensError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as err:  # a malformed scale file: name it
        for path in files.values():
            load_result(path)
        raise EntropyLensError(
            f"sweep {folder}: {first_line(err)}; rerun the sweep into a fresh folder"
        ) from None
    chosen = {float(sweep.scales[np.argmin(np.abs(sweep.scales - 1.0))]): "s={:g}"}
    L = sweep.train_len
    if isinstance(L, int) and not isinstance(L, bool) and 2 <= L < sweep.length:
        star = best_uniform_scale(sweep).scale
        chosen[star] = "s*={:g}" if star not in chosen else "s=s*={:g}"
    results = []
    for scale, name in chosen.items():
        path = next(p for s, p in files.items() if s == scale)
        result = load_result(path)
        if result.n_heads:
            results.append(ResultItem(f"{label} {name.format(scale)}", result, path))
    return results, SweepItem(label, sweep, str(folder))


def _unique_labels(items) -> None:
    seen = set()
    for item in items:
        base, k = item.label, 2
        while item.label in seen:
            item.label, k = f"{base} ({k})", k + 1
        seen.add(item.label)
