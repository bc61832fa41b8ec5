"""The figures' cache: every scan, sweep and head-scale search `entropy-lens figures` runs, stored in
`cache` under a name that hashes its `cache_key()` (the settings that change its numbers, versioned:
settings.Recorded; a head-scale file by its contents), so a rerun reuses what is done and a changed
setting never reads a stale file, while one that changes only how the numbers are computed (--batch-size,
--backend, ...) reuses them. A damaged entry is run again (and said);
with `cached_only` a missing or damaged entry is refused instead. `Runs` (figures/pipeline.py) composes
these into the figures' record, which resolves each on first use.

Every run resolved (read or computed) is noted in `used` (its cache path) and its record of how long
it took in `metas`, `passkey_records`, `search_files` and `watch_times`: the README's time is summed
from them, and a test reads `used` to see that one figure resolves only its own runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

from entropy_lens.errors import EntropyLensError, first_line, problem
from entropy_lens.results import ScanResult, printable
from entropy_lens.runs.output import say

__all__ = ["RunCache"]

# what reading a truncated, foreign or damaged cached file can raise (EntropyLensError is a ValueError)
UNREADABLE = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile)


class RunCache:
    """The runs of one `FiguresConfig`, each cached under a hash of its cache key."""

    def __init__(self, config, cache: Path, progress: bool, cached_only: bool = False):
        self.config, self.cache, self.progress, self.cached_only = config, cache, progress, cached_only
        self.inits: dict[int, float] = {}  # length -> the initial multiplier of each head-scale search
        self.used: list[Path] = []  # the cache path of every run resolved, in order (again when reused)
        self.metas: list[dict] = []  # the meta of every scan, binned scan and sweep scale resolved
        self.passkey_records: list[dict] = []  # every passkey record resolved
        self.search_files: list[str] = []  # every head-scale search resolved (absolute paths)
        self.watch_times: dict[str, dict] = {}  # Figure 18's reruns: file name -> {"wall_s", "threads"}
        self.cache.mkdir(parents=True, exist_ok=True)

    def _missing(self, what: str, path: Path, damage: str | None = None) -> None:
        """Refuse a run that the cache lacks (or holds `damage`d) when only cached runs may be used
        (`cached_only`)."""
        if not self.cached_only:
            return
        if damage is None:
            raise EntropyLensError(
                f"{what} is not in the cache {self.cache} (no {path.name}); run `entropy-lens figures` "
                "without --cached-only to compute it"
            )
        raise EntropyLensError(
            f"{what} is unreadable in the cache: {damage}; run `entropy-lens figures` without --cached-only "
            f"to compute it again (it replaces {path.name})"
        )

    def _cached(self, what: str, path: Path, load, *, say_damage: bool = True):
        """`load(path)`, the cached run; None when the cache has none or an unreadable one (truncated,
        foreign, damaged: said in one line naming the file, unless the rerun says it itself), which
        `cached_only` refuses in one line naming the file and the fix."""
        if not path.is_file():
            self._missing(what, path)
            return None
        try:
            return load(path)
        except UNREADABLE as err:  # whatever a damaged file makes a reader raise: computed again
            damage = printable(  # the reader's own words name the file; a library's error is named here
                problem(err)
                if isinstance(err, EntropyLensError)
                else f"{path} is unreadable ({type(err).__name__}: {first_line(err)})"
            )
            self._missing(what, path, damage)
            if say_damage:
                say(f"{damage}: computing it again")
            return None

    def _path(self, kind: str, config, suffix: str, **extra) -> Path:
        """The cache's name of `config`'s run: a hash of its `cache_key()` (settings.Recorded: the versioned
        record of what changes its numbers) and the `extra` settings of the run (bins, scales, lengths)."""
        settings = {**config.cache_key(), **extra}
        if settings.get("head_scales"):  # the file's contents, not where it lies, name the result
            digest = hashlib.sha256(Path(settings["head_scales"]).read_bytes()).hexdigest()
            settings = {**settings, "head_scales": digest}
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
        name = Path(str(settings.get("model", "x")).rstrip("/")).name
        return self.cache / f"{kind}-{name}-{settings.get('length', '')}-{digest}{suffix}"

    def _scan_config(self, model: str, length: int, **kw):
        from entropy_lens.runs.scan import ScanConfig

        # a run's own keywords over the shared settings (the real model of Figure 17 has its own L, batch)
        return ScanConfig(
            **{**self._shared(), "model": model, "length": length, "samples": self.config.samples, **kw}
        )

    def _shared(self) -> dict:
        """The settings every run of the figures shares (text, seed, device, dtype, batch, L)."""
        c = self.config
        names = ("data", "seed", "device", "dtype", "batch_size", "train_len")
        return {name: getattr(c, name) for name in names}

    def scan(self, model: str, length: int, **kw):
        return self.cached_scan(self._scan_config(model, length, **kw))

    def cached_scan(self, config):
        """The ScanResult of `config`: from the cache, else run (and cached)."""
        from entropy_lens.runs.scan import scan

        config.check()  # a bad --head-scale-ckpt etc. fails here, before the cache is touched
        path = self._path("scan", config, ".npz")
        # the name hashes the cache key (head scales by content): a readable file there is that scan; a
        # damaged one is the cache's own file (its name, its folder), removed and scanned again (a scan's
        # --resume keeps a file it cannot recognise; an interrupted scan's checkpoint still resumes)
        done = self._cached(f"the scan of {config.model} at {config.length}", path, ScanResult.load)
        if done is None:
            if path.is_file() and not path.is_symlink():
                path.unlink()
            if self.progress:
                print(f"scan {config.model} len {config.length} -> {path}", flush=True)
            done = scan(config, out=path, resume=True, progress=self.progress)
        self.used.append(path)
        self.metas.append(done.meta)
        return done

    def curves(self, model: str, length: int, *, bins: int, **kw):
        """The scan of `model` at `length` with the ScanConfig keywords `kw`, kept as its means over `bins`
        bins of positions (`analysis.StatCurves`; width length // bins): from the cache, else scanned to a
        full results file beside it, binned, and that file removed (an interrupted scan resumes from its
        checkpoint there)."""
        from entropy_lens.analysis import StatCurves
        from entropy_lens.runs.scan import scan

        config = self._scan_config(model, length, **kw)
        config.check()
        width = max(1, length // bins)
        path = self._path("curves", config, ".npz", bin_width=width)
        done = self._cached(
            f"the statistics scan of {config.model} at {config.length}", path, StatCurves.load
        )
        if done is None:
            full = path.with_name(f"{path.stem}.full.npz")
            if self.progress:
                print(f"scan {config.model} len {config.length} --stats {config.stats} -> {full}", flush=True)
            done = StatCurves.of(scan(config, out=full, resume=True, progress=self.progress), width)
            done.save(path)
            full.unlink()
        self.used.append(path)
        self.metas.append(done.meta)  # binned: the scan's meta kept
        return done

    def passkey(self, model: str, lengths: list[int], **kw) -> dict:
        """The passkey record (runs/passkey.py) of `model` at `lengths` with the variant flags `kw`: from
        the cache, else run (an unfinished one is continued)."""
        from entropy_lens.analysis.passkey import check_passkey_record
        from entropy_lens.runs.configs import PasskeyConfig
        from entropy_lens.runs.passkey import passkey

        c = self.config
        # the text and its seed do not apply: the prompt is the task's; trials are seeded as the paper's (42)
        shared = {k: v for k, v in self._shared().items() if k not in ("data", "seed", "batch_size")}
        config = PasskeyConfig(
            model=model, lengths=tuple(lengths), depths=c.passkey_depths, keys=c.passkey_keys, **shared, **kw
        )
        config.check()
        path = self._path("passkey", config, ".json", length=max(lengths))
        what = f"the passkey run of {model} up to {max(lengths)}"
        damage = unfinished = None
        if path.is_file():
            try:
                record = check_passkey_record(json.loads(path.read_text()), source=path.name)
                if len(record["results"]) == len(lengths) * c.passkey_depths:
                    return self._note_passkey(path, record)
                unfinished = f"{path.name} is unfinished"  # continued below
            except (OSError, ValueError) as err:  # EntropyLensError is a ValueError
                damage = f"{path.name} is not a passkey record ({type(err).__name__}: {problem(err)})"
        self._missing(what, path, damage or unfinished)
        if damage:
            say(f"{damage}: running it again")
        if self.progress:
            print(f"passkey {model} lens {' '.join(map(str, lengths))} -> {path}", flush=True)
        return self._note_passkey(
            path, passkey(config, out=path, force=damage is not None, progress=self.progress)
        )

    def _note_passkey(self, path: Path, record: dict) -> dict:
        self.used.append(path)
        self.passkey_records.append(record)
        return record

    def sweep(self, model: str, length: int):
        """The loaded Sweep of `model` at `length`: from the cache, else run (a damaged or unfinished
        one is finished and repaired by `runs.sweep.sweep`, which says what it repaired)."""
        from entropy_lens.analysis import load_sweep
        from entropy_lens.results import SWEEP_INDEX
        from entropy_lens.runs.sweep import parse_scales, sweep

        c = self.config
        config = self._scan_config(model, length, samples=c.sweep_samples, entropy="none")
        folder = self._path("sweep", config, "", scales=c.sweep_scales)
        scales = parse_scales(c.sweep_scales)
        damage = None
        if (folder / SWEEP_INDEX).is_file():
            try:  # the folder name hashes the cache key: a complete, readable sweep is this one
                return self._note_sweep(folder, load_sweep(folder))
            except UNREADABLE as err:
                damage = printable(problem(err) if isinstance(err, EntropyLensError) else first_line(err))
        self._missing(f"the sweep of {model} at {length}", folder, damage)
        if self.progress:
            print(f"sweep {model} len {length} scales {c.sweep_scales} -> {folder}", flush=True)
        return self._note_sweep(
            folder, load_sweep(sweep(config, scales, folder, resume=True, progress=self.progress))
        )

    def _note_sweep(self, folder: Path, done):
        self.used.append(folder)
        self.metas.extend(done.meta)
        return done

    def search_config(self, model: str, length: int, init: float, lower_bound: float = 1.0):
        """The HeadSearchConfig of the figures' λ(h) search of `model` at `length` from `init`."""
        from entropy_lens.training.head_search import HeadSearchConfig

        c = self.config
        config = HeadSearchConfig(
            model=model,
            length=length,
            init=init,
            steps=c.search_steps,
            lr=c.search_lr,
            batch=c.search_batch,
            micro_batch=c.search_batch,
            data=c.search_data,
            seed=c.seed,
            dtype=c.dtype,
            device=c.device,
            lower_bound=lower_bound,
        )
        if config.init < config.lower_bound:  # s* below the focus bound: start where the clamp would put it
            config = dataclasses.replace(config, init=config.lower_bound)
        return config

    def search(
        self, model: str, length: int, init: float, lower_bound: float = 1.0, record: bool = True
    ) -> str:
        from entropy_lens.training.head_search import read_head_scales, save_head_scales, search_head_scales

        config = self.search_config(model, length, init, lower_bound)
        if record:  # the init the figures' own search at this length started from
            self.inits[length] = config.init
        path = self._path("heads", config, ".safetensors")
        what = f"the head-scale search of {model} at {length} from {init:g}"
        if path.is_file():
            try:
                read_head_scales(path)
            except EntropyLensError as err:  # damaged: searched again (and said)
                self._missing(what, path, problem(err))
                say(f"{problem(err)}: searching again")
                path.unlink()
        if not path.is_file():
            self._missing(what, path)
            if self.progress:
                print(f"search-heads {model} len {length} init {init:g} -> {path}", flush=True)
            save_head_scales(search_head_scales(config, progress=self.progress), path)
        self.used.append(path)
        self.search_files.append(str(path.resolve()))
        return str(path)
