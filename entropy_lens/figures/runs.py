"""The scans, sweep and head-scale search behind the figures, cached under hashes of their settings."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from entropy_lens.errors import EntropyLensError


class Runs:
    """The scans, sweep and search behind the figures, each cached under a hash of its settings."""

    def __init__(self, config, cache: Path, progress: bool):
        self.config, self.cache, self.progress = config, cache, progress
        self.cache.mkdir(parents=True, exist_ok=True)

    def compute(self) -> dict:
        from entropy_lens.analysis import best_uniform_scale, fit_scale_curve, load_sweep
        from entropy_lens.models import declared_train_len

        c = self.config
        L = c.train_len or declared_train_len(c.nope)
        if not L:
            raise EntropyLensError(f"{c.nope} declares no training length; pass --train-len L")
        short, long, fit_len = c.short * L, c.long * L, c.length or c.fit * L
        if fit_len < long:
            raise EntropyLensError(f"--len {fit_len} is shorter than Figure 4's {long} = {c.long}L; pass at least {long}")
        d: dict = {"L": L, "short": short, "long": long, "fit_len": fit_len}
        d["nope_family"] = {s: self.scan(c.nope, short, scale=s) for s in c.nope_scales}
        d["rope_family"] = {s: self.scan(c.rope, short, scale=s) for s in c.rope_scales}
        d["nope"] = self.scan(c.nope, short)
        d["nope_scaled"] = self.scan(c.nope, short, scale=c.fig1_scale)
        d["rope"] = self.scan(c.rope, short)
        d["rope_ntk"] = self.scan(c.rope, short, rope_scaling=c.ntk)
        d["sweep"] = sweep = load_sweep(self.sweep(c.nope, fit_len))
        d["fit"] = fit_scale_curve(sweep, train_len=L, smooth=c.fit_smooth)
        d["uniform_scale"] = s_long = best_uniform_scale(sweep, length=long)
        # absolute, so the scans' settings (and the cache names) do not depend on the working directory
        d["head_scales_file"] = hs = str(Path(c.head_scales or self.search(c.nope, long, s_long)).resolve())
        d["long_nope"] = self.scan(c.nope, long)
        d["long_uniform"] = self.scan(c.nope, long, scale=s_long)
        d["long_heads"] = self.scan(c.nope, long, head_scales=hs)
        d["short_heads"] = self.scan(c.nope, short, head_scales=hs)
        return d

    def _path(self, kind: str, settings: dict, suffix: str) -> Path:
        if settings.get("head_scales"):  # the file's contents, not where it lies, name the result
            digest = hashlib.sha256(Path(settings["head_scales"]).read_bytes()).hexdigest()
            settings = {**settings, "head_scales": digest}
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
        name = Path(str(settings.get("model", "x")).rstrip("/")).name
        return self.cache / f"{kind}-{name}-{settings.get('length', '')}-{digest}{suffix}"

    def _scan_config(self, model: str, length: int, **kw):
        from entropy_lens.scanning import ScanConfig

        c = self.config
        return ScanConfig(model=model, length=length, samples=kw.pop("samples", c.samples), data=c.data,
                          seed=c.seed, device=c.device, dtype=c.dtype, batch_size=c.batch_size,
                          train_len=c.train_len, **kw)  # fmt: skip

    def scan(self, model: str, length: int, **kw):
        from entropy_lens.scanning import scan

        config = self._scan_config(model, length, **kw)
        config.check()  # a bad --head-scale-ckpt etc. fails here, before the cache is touched
        path = self._path("scan", config.to_dict(), ".npz")
        if path.is_file():  # the name hashes every setting (head scales by content): this is that scan
            from entropy_lens.results import ScanResult

            return ScanResult.load(path)
        if self.progress:
            print(f"scan {model} len {length} {kw or ''} -> {path}", flush=True)
        return scan(config, out=path, resume=True, progress=self.progress)

    def sweep(self, model: str, length: int) -> Path:
        from entropy_lens.results import SWEEP_INDEX, read_sweep_index
        from entropy_lens.sweep import parse_scales, sweep

        c = self.config
        config = self._scan_config(model, length, samples=c.sweep_samples, entropy="none")
        folder = self._path("sweep", {**config.to_dict(), "scales": c.sweep_scales}, "")
        scales = parse_scales(c.sweep_scales)
        if (folder / SWEEP_INDEX).is_file() and read_sweep_index(folder).get("complete"):
            return folder  # the folder name hashes every setting: a complete sweep is this one
        if self.progress:
            print(f"sweep {model} len {length} scales {c.sweep_scales} -> {folder}", flush=True)
        return sweep(config, scales, folder, resume=True, progress=self.progress)

    def search(self, model: str, length: int, init: float) -> str:
        from entropy_lens.head_search import HeadSearchConfig, save_head_scales, search_head_scales

        c = self.config
        config = HeadSearchConfig(model=model, length=length, init=init, steps=c.search_steps, lr=c.search_lr,
                                  batch=c.search_batch, micro_batch=c.search_batch, data=c.search_data,
                                  seed=c.seed, dtype=c.dtype, device=c.device)  # fmt: skip
        path = self._path("heads", dataclasses.asdict(config), ".safetensors")
        if not path.is_file():
            if self.progress:
                print(f"search-heads {model} len {length} init {init:g} -> {path}", flush=True)
            save_head_scales(search_head_scales(config, progress=self.progress), path)
        return str(path)

