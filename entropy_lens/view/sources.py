"""What a view shows, resolved from what the user names: results files, sweep folders, or objects.

    items = resolve(["nope.npz", "rope.npz", "sw/nope"])      # paths, as `entropy-lens view` takes them
    items = resolve([("NoPE", nope), ("λ(h)", heads)])        # (label, ScanResult) pairs from Python

A sweep folder gives a `SweepItem` (loss by position × scale, the fit) and, when its scale files hold
entropy, two of its scans as ordinary results for the head explorer: the scale nearest 1 (the model as
trained) and s*, the uniform scale of lowest loss over the last L/2 positions (`analysis.best_uniform_scale`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from entropy_lens.analysis import Sweep, best_uniform_scale, load_sweep
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import SWEEP_INDEX, ScanResult, read_sweep_index

__all__ = ["ResultItem", "SweepItem", "resolve"]


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
                results.append(ResultItem(label or path.stem, ScanResult.load(path), str(path)))
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


def _sweep_folder(folder: Path, label: str) -> tuple[list[ResultItem], SweepItem]:
    if not (folder / SWEEP_INDEX).is_file():
        raise EntropyLensError(
            f"{folder} is a folder without {SWEEP_INDEX}; pass a results .npz or a folder written by "
            "`entropy-lens sweep`"
        )
    sweep = load_sweep(folder)
    files = dict(zip(read_sweep_index(folder)["scales"], read_sweep_index(folder)["files"]))
    chosen = {float(sweep.scales[np.argmin(np.abs(sweep.scales - 1.0))]): "s={:g}"}
    if sweep.train_len and sweep.train_len < sweep.length:
        star = best_uniform_scale(sweep).scale
        chosen[star] = "s*={:g}" if star not in chosen else "s=s*={:g}"
    results = []
    for scale, name in chosen.items():
        path = next(p for s, p in files.items() if float(s) == scale)
        result = ScanResult.load(path)
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
