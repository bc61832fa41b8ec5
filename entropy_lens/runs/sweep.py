"""sweep(config, scales, out_dir): one scan per uniform scale multiplier s (λ = s/√d), into a folder.

    DIR/sweep.json      the index (results.write_sweep_index): scales done, their files, `complete`
    DIR/s1.2.npz        an ordinary scan results file per scale (same schema as `entropy-lens scan`)

Resumable per scale: finished scales are kept (after checking that they are the same scan), an
interrupted one continues from its `.partial.npz`. Rerunning the same command (same flags and scales)
into its folder resumes by itself; `resume=True` (--resume) also continues a folder's sweep with other
scales, and `force=True` starts over. Entropy is stored averaged over each layer's
heads by default (`entropy="mean"`): [layers, heads, T] for 100 scales at 16K would be ~4.6 GB;
`entropy="heads"` keeps everything and `entropy="none"` skips the entropy pass (loss only).

Every scale reloads the model through `scan`, which costs ~1 s for a 1B model: small against a
scan at 16K; the token chunks are cached in-process, so every scale sees the same samples.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import SWEEP_INDEX, read_sweep_index, write_sweep_index
from entropy_lens.runs.scan import ScanConfig, scan

__all__ = ["parse_scales", "scale_file", "sweep"]


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
    base = dataclasses.replace(config, scale=None).to_dict()
    if out_dir.exists() and any(out_dir.iterdir()):
        index = read_sweep_index(out_dir) if (out_dir / SWEEP_INDEX).is_file() else None
        same = index is not None and index["scan_config"] == base
        if force:
            _clear(out_dir)
        elif same and index.get("requested_scales") == scales:
            resume = True  # this very sweep (same flags, same scales): continue it, keep what is done
            if progress and not index.get("complete"):
                print(f"{out_dir} holds this sweep, unfinished: resuming (--force starts over)", flush=True)
        elif not resume:
            raise EntropyLensError(
                f"{out_dir} is not empty and holds no sweep of these flags and scales; pass --resume to "
                "finish a sweep there with these flags, --force to overwrite it, or another --out"
            )
        elif index is not None and not same:
            raise EntropyLensError(
                f"{out_dir} holds a sweep with other flags (model, length, data, ...); rerun with the same "
                "flags, pass --force to overwrite it, or another --out"
            )
    done: list[float] = []
    index = {
        "scan_config": base,
        "requested_scales": scales,
        "model": config.model,
        "len": config.length,
        "data": config.data,
        "samples": config.samples,
        "seed": config.seed,
        "entropy": config.entropy,
    }
    for i, s in enumerate(scales):
        path = out_dir / scale_file(s)
        if progress:
            print(f"[{i + 1}/{len(scales)}] scale {s:g} -> {path}", flush=True)
        scan(
            dataclasses.replace(config, scale=s), out=path, resume=resume, progress=progress
        )  # resume reuses a finished file, or continues
        done.append(s)
        write_sweep_index(
            out_dir,
            {
                **index,
                "scales": done,
                "files": [scale_file(x) for x in done],
                "complete": len(done) == len(scales),
            },
        )
    return out_dir


def _clear(folder: Path) -> None:
    """Remove what a sweep writes (index, per-scale files and partials); refuse folders with other files."""
    ours = [
        p for p in folder.iterdir() if p.name == SWEEP_INDEX or (p.name.startswith("s") and ".npz" in p.name)
    ]
    others = [p.name for p in folder.iterdir() if p not in ours]
    if others:
        raise EntropyLensError(
            f"--force would delete {folder}, which also holds {', '.join(sorted(others)[:3])}; pass another "
            "--out"
        )
    for p in ours:
        p.unlink() if p.is_file() else shutil.rmtree(p)
