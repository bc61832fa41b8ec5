"""What a view shows, resolved from what the user names: results files, sweep folders, or objects.

    items = resolve(["nope.npz", "rope.npz", "sw/nope"])      # paths, as `entropy-lens view` takes them
    items = resolve([("NoPE", nope), ("λ(h)", heads)])        # (label, ScanResult) pairs from Python

A sweep folder gives a `SweepItem` (loss by position × scale, the fit) and, when its scale files hold
entropy, two of its scans as ordinary results for the head explorer: the scale nearest 1 (the model as
trained) and s*, the uniform scale of lowest loss over the last L/2 positions (`analysis.best_uniform_scale`).

Files are untrusted (a page made of them is shared): every results file is checked before anything is drawn
(`ScanResult.load` and `check_result`: array shapes and types, NaN/inf, meta types), and a sweep folder's
`sweep.json` may name only files inside the folder, symlinks resolved (`results.read_sweep_index`, the one
reader of every sweep index), so a page never embeds a file from elsewhere.
A file that fails a check is refused in one line that names it, what is wrong and the fix.

A monitor history (`AttentionMonitor.save`, train-tiny --monitor's `attention-history.npz`, also named by
its folder) gives a `HistoryItem`: each statistic by training step × head, per layer. It is told from a
results file by its meta's schema (`results.history.is_history`), never by its name. A generation
(`GenerationResult.save`, `entropy-lens generate --out`) gives a `GenerationItem`, told by its schema
alike (`results.generation.is_generation`) and checked by `GenerationResult.load` and
`check_generation`. `gather` returns the four kinds, `resolve` the results and sweeps of a page without
histories or generations.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from entropy_lens.analysis import Sweep, best_uniform_scale, load_sweep
from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.results import SWEEP_INDEX, ScanResult, printable, read_sweep_index
from entropy_lens.results.generation import TOKEN_TEXTS, GenerationResult, is_generation
from entropy_lens.results.history import HISTORY_FILE, History, is_history, load_history
from entropy_lens.statistics import ENTROPY

__all__ = [
    "GenerationItem",
    "HistoryItem",
    "ResultItem",
    "Sources",
    "SweepItem",
    "check_generation",
    "check_result",
    "gather",
    "load_file",
    "load_result",
    "resolve",
    "sweep_files",
]

ARRAY_DIMS = {
    **dict.fromkeys(ENTROPY.sums, 3),
    "loss": 1,
    "loss_sq": 1,
    "count": 1,
}  # a results file's arrays
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


@dataclass
class HistoryItem:
    label: str
    history: History
    source: str


@dataclass
class GenerationItem:
    label: str
    generation: GenerationResult
    source: str


@dataclass
class Sources:
    results: list[ResultItem]
    sweeps: list[SweepItem]
    histories: list[HistoryItem]
    generations: list[GenerationItem]


WHAT = "results file, monitor history or generation"
AGAIN = (
    "pass a file written by entropy-lens scan, by AttentionMonitor.save (train-tiny --monitor) or by "
    "entropy-lens generate"
)


def resolve(items, labels=None) -> tuple[list[ResultItem], list[SweepItem]]:
    """The results and sweeps of `gather(items, labels)`; EntropyLensError where a history or a
    generation is among them (a page of those: `gather`, or `view`)."""
    found = gather(items, labels)
    for kind, others in (("monitor history", found.histories), ("generation", found.generations)):
        if others:
            raise EntropyLensError(
                f"{others[0].source} is a {kind}; view it with entropy_lens.view.view "
                "(or sources.gather, which returns those too)"
            )
    return found.results, found.sweeps


def gather(items, labels=None) -> Sources:
    """Results, sweeps, monitor histories and generations from paths (`.npz`, a sweep folder, a folder
    holding attention-history.npz), `ScanResult`s, `Sweep`s, `History`s, `GenerationResult`s or (label,
    any of those) pairs; `labels` names them in order (default: file names, "result 1", ...)."""
    if isinstance(items, (str, Path, ScanResult, Sweep, History, GenerationResult, tuple)):
        items = [items]
    items = list(items)
    if not items:
        raise EntropyLensError("nothing to view; pass a results .npz, a sweep folder or a monitor history")
    if labels is not None and len(labels) != len(items):
        raise EntropyLensError(
            f"{len(labels)} labels for {len(items)} results; pass one label per result (or none)"
        )
    results, sweeps, histories, generations = [], [], [], []
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
        elif isinstance(item, History):
            histories.append(HistoryItem(label or f"history {i + 1}", _checked(item), "(in memory)"))
        elif isinstance(item, GenerationResult):
            check_generation(item, label or f"generation {i + 1}")
            generations.append(GenerationItem(label or f"generation {i + 1}", item, "(in memory)"))
        elif isinstance(item, (str, Path)):
            path = Path(item)
            if path.is_dir() and not (path / SWEEP_INDEX).is_file() and (path / HISTORY_FILE).is_file():
                path = path / HISTORY_FILE  # train-tiny --monitor's output folder: its history
                label = label or path.parent.name
            if path.is_dir():
                found, sweep = _sweep_folder(path, label or path.name)
                results += found
                sweeps.append(sweep)
            elif path.suffix == ".npz" or path.is_file():
                loaded = load_file(path)
                kind, found = {
                    History: (HistoryItem, histories),
                    GenerationResult: (GenerationItem, generations),
                }.get(type(loaded), (ResultItem, results))
                found.append(kind(label or path.stem, loaded, str(path)))
            else:
                raise EntropyLensError(
                    f"{path} does not exist; pass a results .npz (entropy-lens scan), a sweep folder "
                    "(entropy-lens sweep), a monitor history (AttentionMonitor.save) or a generation "
                    "(entropy-lens generate)"
                )
        else:
            raise EntropyLensError(
                f"cannot view a {type(item).__name__}; pass ScanResult, Sweep, History, GenerationResult, "
                "a path, or (label, one of these)"
            )
    for found in (results, sweeps, histories, generations):
        _unique_labels(found)
    return Sources(results, sweeps, histories, generations)


def load_file(path: str | Path) -> ScanResult | History | GenerationResult:
    """The results file, monitor history or generation at `path`, told apart by the meta's schema
    (`results.history.is_history`, `results.generation.is_generation`) and checked by its own reader
    (`load_result`, `load_history`, `GenerationResult.load` and `check_generation`): a file that is
    none of them, or a damaged one, is one EntropyLensError naming it."""
    if not Path(path).is_file():
        return load_result(path)  # its one line: the file does not exist
    if is_history(path, what=WHAT, again=AGAIN):
        return _checked(load_history(path), str(path))
    if is_generation(path, what=WHAT, again=AGAIN):
        generation = GenerationResult.load(path)
        check_generation(generation, str(path))
        return generation
    return load_result(path)


def check_generation(generation: GenerationResult, source: str) -> None:
    """Refuse, in one line naming `source`, a generation the page cannot draw: no generated token, ids
    or lengths that are not whole numbers, lengths outside [0, N], or meta token_texts that is not
    {id: text} (`GenerationResult.load` has checked the shapes and that every live value is finite)."""
    again = "record it again (entropy-lens generate, or GenerationRecorder(...).result().save(path))"
    tokens, lengths = generation.tokens, generation.lengths
    if tokens.shape[1] == 0:
        raise EntropyLensError(f"{printable(source)}: the generation holds no generated token; {again}")
    arrays = {"tokens": tokens, "lengths": lengths, "prompt_len": generation.prompt_len}
    if generation.prompt is not None:
        arrays["prompt"] = generation.prompt
    for name, a in arrays.items():
        if np.asarray(a).dtype.kind not in "iu":
            raise EntropyLensError(f"{printable(source)}: {name} is {a.dtype}, not whole numbers; {again}")
    if ((lengths < 0) | (lengths > tokens.shape[1])).any():
        raise EntropyLensError(
            f"{printable(source)}: lengths {lengths.tolist()} are not within 0..{tokens.shape[1]} generated "
            f"tokens; {again}"
        )
    texts = generation.meta.get(TOKEN_TEXTS)
    if texts is not None and not (
        isinstance(texts, dict)
        and all(
            isinstance(k, str) and k.isascii() and k.isdigit() and isinstance(v, str)
            for k, v in texts.items()
        )
    ):
        raise EntropyLensError(
            f"{printable(source)}: meta {TOKEN_TEXTS} is not {{id: text}}; {again}, or remove the field"
        )


def _checked(history: History, source: str = "(in memory)") -> History:
    """`history`, refused in one line where it holds no recorded step (a page would draw nothing)."""
    if not len(history) and len(history.nonfinite):
        raise EntropyLensError(
            f"{printable(source)}: every recorded step of the monitor history ({_steps(history.nonfinite)}) "
            "had attention that was not finite (NaN or inf: diverged weights, a bf16/fp16 overflow), so it "
            "holds no number to draw; check the training run"
        )
    if not len(history):
        raise EntropyLensError(
            f"{printable(source)}: the monitor history holds no recorded step; train with the monitor active "
            "(every <= the steps run) and save it again"
        )
    return history


def _steps(steps) -> str:
    steps = [int(s) for s in steps]
    return ", ".join(map(str, steps)) if len(steps) <= 6 else f"{len(steps)} steps, {steps[0]}..{steps[-1]}"


def load_result(path: str | Path) -> ScanResult:
    """`ScanResult.load(path)`, checked by `check_result`; any malformed content is one EntropyLensError
    (the loader refuses wrong types, shapes and NaN/inf; a page never draws a damaged file)."""
    result = ScanResult.load(path)
    check_result(result, str(path))
    return result


def check_result(result: ScanResult, source: str) -> None:
    """Refuse, in one line naming `source`, a result the page cannot draw: arrays (row statistics too)
    that are not real numbers of shapes (layers, heads, T) and (T,), no positions, meta fields of the
    wrong type (`ScanResult.validate`), or sample counts that are not finite. NaN/inf statistics or loss
    of a result made in Python are allowed: the page draws them as gaps (a file holding them is refused
    by `ScanResult.load`)."""
    for name, ndim in ARRAY_DIMS.items():
        a = np.asarray(getattr(result, name))
        if a.dtype.kind not in "iuf" or a.ndim != ndim:
            raise EntropyLensError(
                f"{printable(source)}: {name} is {a.dtype} of shape {a.shape}, not real numbers of shape "
                f"{_SHAPES[ndim]}; {RESCAN}"
            )
    try:
        result.validate(source=source)  # its errors name `source` already
    except EntropyLensError:
        raise
    except (ValueError, TypeError) as err:  # an in-memory result's arrays that numpy cannot compare
        raise EntropyLensError(f"{printable(source)}: {first_line(err)}") from None
    if not np.all(np.isfinite(result.count)):
        raise EntropyLensError(f"{printable(source)}: count (samples per position) holds NaN/inf; {RESCAN}")


def sweep_files(folder: Path) -> dict[float, str]:
    """{scale: path} of the files `folder/sweep.json` lists: `read_sweep_index` has checked each to lie
    inside `folder` (symlinks resolved) and each scale to be a finite number."""
    index = read_sweep_index(folder)
    return dict(zip((float(s) for s in index["scales"]), index["files"]))


def _sweep_folder(folder: Path, label: str) -> tuple[list[ResultItem], SweepItem]:
    if not (folder / SWEEP_INDEX).is_file():
        raise EntropyLensError(
            f"{folder} is a folder without {SWEEP_INDEX}; pass a results .npz or a folder written by "
            "`entropy-lens sweep`"
        )
    files = sweep_files(folder)
    sweep = load_sweep(folder)  # every file checked (ScanResult.load): a malformed one is named
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
