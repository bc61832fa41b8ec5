"""sweep(config, scales, out_dir): one scan per uniform scale multiplier s (λ = s/√d), into a folder.

    DIR/sweep.json      the index (results.write_sweep_index): scales done, their files, `complete`
    DIR/s1.2.npz        an ordinary scan results file per scale (same schema as `entropy-lens scan`)

Resumable per scale: finished scales are kept (after checking that they are the same scan), an
interrupted one continues from its `.partial.npz`. Rerunning the same command (same flags and scales)
into its folder resumes by itself; `resume=True` (--resume) also continues a folder's sweep with other
scales, and `force=True` starts over. One sweep at a time writes a folder (a lock, runs/lock.py).
The index only ever lists what is on disk and readable: it is rebuilt from the per-scale files that
load and belong to this sweep's flags (so a damaged `sweep.json` is repaired, and an unreadable scale
file is scanned again, each said in a line). Entropy is stored averaged over each layer's
heads by default (`entropy="mean"`): [layers, heads, T] for 100 scales at 16K would be ~4.6 GB;
`entropy="heads"` keeps everything and `entropy="none"` skips the entropy pass (loss only).

Under torchrun with `context_parallel` (--context-parallel [C]) every rank scans every scale, each
sequence sharded over all the ranks, or over a group of C of them, the groups splitting the samples
(runs/context_parallel.py): rank 0 alone keeps the folder (lock, index, files) and tells the others
which scales to scan; one process group serves all the scans.

Every scale reloads the model through `scan`, which costs little against a scan at 16K; the token chunks are cached in-process, so every scale sees the same samples.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

from entropy_lens.errors import EntropyLensError, problem
from entropy_lens.results import SWEEP_INDEX, ScanResult, read_sweep_index, write_sweep_index
from entropy_lens.runs.configs import SWEEP_ENTROPY
from entropy_lens.runs.context_parallel import check_context_parallel
from entropy_lens.runs.distributed import broadcast_object, command_group, world
from entropy_lens.runs.lock import FOLDER_LOCK, OutputLock
from entropy_lens.runs.output import check_folder_target, say, scan_difference
from entropy_lens.runs.scan import ScanConfig, scan
from entropy_lens.settings import command_words

__all__ = ["parse_scales", "scale_file", "sweep", "sweep_command"]


THERE = ("here", "in the folder")  # how `scan_difference` words the folder's sweep


def parse_scales(spec: str) -> list[float]:
    """'1.0:2.0:0.01' (start:stop:step, stop included), '1.0,1.2,1.6', or a comma list of both
    ('0.1:0.8:0.1,0.9:3.2:0.01': a coarse range below a fine one) -> ascending unique floats."""
    values = []
    try:
        for part in (p.strip() for p in spec.split(",")):
            if ":" in part:
                start, stop, step = (float(x) for x in part.split(":"))
                if not step > 0 or stop < start:
                    raise ValueError
                n = math.floor((stop - start) / step + 1e-9) + 1
                values += [start + i * step for i in range(n)]
            elif part:
                values.append(float(part))
    except ValueError:
        raise EntropyLensError(
            f"--scales {spec!r} is not start:stop:step (e.g. 1.0:2.0:0.01), a comma list (e.g. 1.0,1.2) "
            "or a comma list of both (e.g. 0.1:0.8:0.1,0.9:2.0:0.01)"
        ) from None
    values = sorted({round(v, 6) for v in values})
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise EntropyLensError(f"--scales {spec!r} must give positive finite multipliers of 1/sqrt(d)")
    return values


def scale_file(s: float) -> str:
    return f"s{s:g}.npz"


def sweep(
    config: ScanConfig,
    scales: list[float],
    out_dir: str | Path,
    *,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Scan `config` once per scale in `scales` (its own `scale` is ignored); returns the folder."""
    out_dir = Path(out_dir)
    if config.scale is not None or config.head_scales is not None:
        raise EntropyLensError("a sweep sets the scale itself; drop --scale / --head-scales")
    config.check()
    w = world()
    if w.size > 1 and not config.context_parallel:
        raise EntropyLensError(
            "sweep runs in one process; run it without torchrun, or pass --context-parallel to shard "
            "each sequence over torchrun's processes (--context-parallel C: over groups of C of them)"
        )
    check_context_parallel(config, w)
    check_folder_target(out_dir)
    with command_group(config.device, w):
        if not w.main:  # the scales rank 0 scans, each sequence sharded over a group of ranks
            for s in broadcast_object(None):
                scan(dataclasses.replace(config, scale=s), progress=False)
            return out_dir
        return _sweep(config, scales, out_dir, resume=resume, force=force, progress=progress, ranks=w.size)


def _sweep(config, scales, out_dir: Path, *, resume: bool, force: bool, progress: bool, ranks: int) -> Path:
    """The sweep as rank 0 (or the one process) runs it: the folder, then the scales not done."""
    base = dataclasses.replace(config, scale=None).to_dict()
    with OutputLock(out_dir, folder=True):
        if force:
            _clear(out_dir)
        index, damaged = _index_or_damage(out_dir)
        found, foreign = _scale_files(out_dir, config, progress)
        differs = None if index is None else scan_difference(base, index["scan_config"], names=THERE)
        if differs is None and damaged and foreign and not found:
            differs = f"its scale files {', '.join(foreign[:2])} are of other flags"
        if differs is not None:
            raise EntropyLensError(
                f"{out_dir} holds a sweep with other flags ({differs}); rerun with the same flags, pass "
                "--force to overwrite it, or another --out"
            )
        requested = scales
        if any(p.name != FOLDER_LOCK for p in out_dir.iterdir()):
            same = index.get("requested_scales") == scales if index is not None else bool(found)
            if same:
                resume = True  # this very sweep (same flags, same scales): continue it, keep what is done
                if progress and not (index or {}).get("complete"):
                    print(
                        f"{out_dir} holds this sweep, unfinished: resuming (--force starts over)", flush=True
                    )
            elif not resume:
                raise EntropyLensError(
                    f"{out_dir} is not empty and holds no sweep of these flags and scales; pass --resume to "
                    "finish a sweep there with these flags, --force to overwrite it, or another --out"
                )
            requested = sorted({*scales, *((index or {}).get("requested_scales") or ())})
        record = {
            "scan_config": base,
            "requested_scales": requested,
            "model": config.model,
            "length": config.length,
            "data": config.data,
            "samples": config.samples,
            "seed": config.seed,
            "entropy": config.entropy,
            "command": sweep_command(config),
        }
        _write_index(out_dir, record, found)  # what is on disk now: the union, never less
        if damaged:
            say(f"{out_dir / SWEEP_INDEX} was unreadable: rebuilt from the {len(found)} readable scale files")
        if ranks > 1:  # the other ranks scan what is not done with us; resuming a scan is one process's
            broadcast_object([s for s in scales if s not in found])
            resume = False
        for i, s in enumerate(scales):
            path = out_dir / scale_file(s)
            if progress:
                print(f"[{i + 1}/{len(scales)}] scale {s:g} -> {path}", flush=True)
            if s in found:  # read and checked above: finished, of these flags
                continue
            scan(dataclasses.replace(config, scale=s), out=path, resume=resume, progress=progress)
            found[s] = path.name
            _write_index(out_dir, record, found)
    return out_dir


def sweep_command(config: ScanConfig) -> str:
    """`entropy-lens sweep` with the flags that give `config` (without --scales and --out)."""
    words = command_words(config, defaults={"entropy": SWEEP_ENTROPY}, exclude=("scale", "head_scales"))
    return " ".join(["entropy-lens sweep", *words])


def _write_index(folder: Path, record: dict, found: dict[float, str]) -> None:
    """The index of what is on disk: every readable scale file of this sweep, ascending."""
    done = sorted(found)
    complete = set(record["requested_scales"]) <= set(done)
    write_sweep_index(
        folder, {**record, "scales": done, "files": [found[s] for s in done], "complete": complete}
    )


def _index_or_damage(folder: Path) -> tuple[dict | None, bool]:
    """(the folder's index or None, whether an index is there but unreadable)."""
    if not (folder / SWEEP_INDEX).is_file():
        return None, False
    try:
        return read_sweep_index(folder), False
    except EntropyLensError:
        return None, True


def _scale_files(folder: Path, config: ScanConfig, progress: bool) -> tuple[dict[float, str], list[str]]:
    """({scale: file name} of the readable scale files of `config`'s flags, names of readable scale
    files of other flags). An unreadable one is left out of both, and said: a rerun scans it again."""
    found, foreign = {}, []
    if not folder.is_dir():
        return found, foreign
    for path in sorted(folder.glob("s*.npz")):
        if path.name.endswith(".partial.npz"):
            continue
        try:
            meta = ScanResult.load(path).meta
        except EntropyLensError as err:
            say(f"{problem(err)}: left out of the index; this sweep scans it again")
            continue
        s = (meta.get("scan_config") or {}).get("scale")
        if (
            s is not None
            and path.name == scale_file(s)
            and scan_difference(dataclasses.replace(config, scale=s).to_dict(), meta["scan_config"]) is None
        ):
            found[s] = path.name
        else:
            foreign.append(path.name)
    return found, foreign


def _clear(folder: Path) -> None:
    """Remove what a sweep writes (index, per-scale files and partials); refuse folders with other files."""
    if not folder.is_dir():
        return
    ours = [
        p
        for p in folder.iterdir()
        if p.name in (SWEEP_INDEX, FOLDER_LOCK) or (p.name.startswith("s") and ".npz" in p.name)
    ]
    others = [p.name for p in folder.iterdir() if p not in ours]
    if others:
        raise EntropyLensError(
            f"--force would delete {folder}, which also holds {', '.join(sorted(others)[:3])}; pass another "
            "--out"
        )
    for p in ours:
        if p.name != FOLDER_LOCK:
            p.unlink() if p.is_file() else shutil.rmtree(p)
