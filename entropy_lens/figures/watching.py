"""Figure 18's runs: the embedded models' pretraining watched, and the λ(h) search watched.

- **Training:** the recipe in the embedded model's training.json, pretraining only (`TinyRecipe.
  pretraining()`: the first `steps` steps, no passkey phase), rerun by `train_tiny` with the monitor
  (`--monitor entropy,max_logit --monitor-every 10`), which changes no weight (training/watch.py). Its
  history is cached as `watch-tiny-<kind>-<L>-<hash>.npz`, the history file itself with the rerun's
  training.json facts (recipe, loss log, threads, wall time) in its meta under "training"; the weights
  are not kept. A finished run folder (`entropy-lens train-tiny ... --monitor entropy,max_logit
  --monitor-every 10 --out DIR`) becomes that file by `adopt_training(DIR, cache)`.
- **Search:** the figures' own λ(h) search at long·L (figures/cache.py's `search`, same config) rerun
  with the monitor every step; cached as `watch-heads-<model>-<length>-<hash>.npz`, its scales and loss
  log in the meta under "search".

Each is found by a versioned cache key: the run's own key (the recipe; the search's `cache_key()`), the
statistics, how often, and WATCH_VERSION. Under `cached_only` a missing history is left out of the
figure (its README words say which file is missing) rather than refused: a training rerun is long (docs/internals/layout.md).
With the setting `watch_training: false` no training is rerun (the cache's histories are still drawn).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.history import History, load_history

__all__ = [
    "KINDS",
    "SEARCH_EVERY",
    "TRAIN_EVERY",
    "WATCH_STATS",
    "WATCH_VERSION",
    "Watched",
    "WatchedRun",
    "WatchedRuns",
    "adopt_training",
    "training_key",
]

WATCH_STATS = ("entropy", "max_logit")
TRAIN_EVERY = 10  # a record every 10th optimiser step: 150 records of 1500 steps
SEARCH_EVERY = 1  # the search's 200 steps, each
WATCH_VERSION = 1  # bump when what a watched history holds changes
KINDS = {"nope": "NoPE", "rope": "RoPE", "alibi": "ALiBi"}


@dataclass(frozen=True)
class WatchedRun:
    """One embedded model's pretraining, rerun with the monitor."""

    name: str  # "NoPE", "RoPE", "ALiBi"
    file: str  # the cache file's name
    history: History  # entropy and max_logit (records, layers, heads), steps 10, 20, ...
    log: list[dict]  # the rerun's loss log ({"step", "loss", ...} every 10 steps)
    embedded_log: list[dict]  # the embedded run's log up to the last pretraining step
    steps: int  # pretraining steps
    threads: int | None  # the rerun's CPU threads (the embedded pretraining's: `embedded_threads`)
    embedded_threads: int | None


@dataclass(frozen=True)
class Watched:
    """Figure 18's runs; a run not in the cache under `cached_only` is None, with its file in `missing`."""

    runs: dict[str, WatchedRun | None]  # {"NoPE", "RoPE", "ALiBi"}: the models trained by train-tiny
    missing: dict[str, str]  # {name: the cache file it would be read from}
    search: History | None  # the λ(h) search's history; None: not cached, or λ(h) given
    search_file: str | None  # its cache file's name (missing or not); None: λ(h) given, nothing searched
    search_scales: np.ndarray | None  # (layers, heads) the multipliers it found
    clamp: float  # the search's lower bound on λ(h)·√d


def training_key(recipe) -> dict:
    """The cache key of a watched pretraining of `recipe` (a TinyRecipe, pretraining only)."""
    return {
        "v": WATCH_VERSION,
        "model": f"tiny-{recipe.kind}",
        "length": recipe.train_len,
        "recipe": asdict(recipe),
        "stats": list(WATCH_STATS),
        "every": TRAIN_EVERY,
    }


def watch_path(cache: Path, kind: str, key: dict) -> Path:
    """`cache`/`kind`-<model>-<length>-<hash>.npz (the hash of `key`, as figures/cache.py names runs)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return cache / f"{kind}-{Path(str(key['model'])).name}-{key['length']}-{digest}.npz"


def adopt_training(folder: str | Path, cache: str | Path) -> Path:
    """The history of a finished `train-tiny --monitor entropy,max_logit --monitor-every 10` run in
    `folder`, with its training.json facts in the meta, written into `cache` under its cache name;
    EntropyLensError in one line where the run is not such a run."""
    from entropy_lens.training import TinyRecipe
    from entropy_lens.training.training_record import read_training_record

    folder = Path(folder)
    record = read_training_record(folder)
    recipe = TinyRecipe(**record["recipe"])
    if recipe != recipe.pretraining():
        raise EntropyLensError(f"{folder} ran a passkey phase; Figure 18 watches pretraining only")
    history = load_history(folder / "attention-history.npz")
    if list(history.stats) != list(WATCH_STATS) or history.meta.get("every") != TRAIN_EVERY:
        raise EntropyLensError(
            f"{folder} monitored {','.join(history.stats)} every {history.meta.get('every')} steps; "
            f"rerun it with --monitor {','.join(WATCH_STATS)} --monitor-every {TRAIN_EVERY}"
        )
    facts = {k: record.get(k) for k in ("recipe", "log", "threads", "wall_s", "torch", "data")}
    history.meta = {**history.meta, "training": facts, "cache_key": training_key(recipe)}
    path = watch_path(Path(cache), "watch", training_key(recipe))
    history.save(path)
    return path


class WatchedRuns:
    """The runs of Figure 18, for figures/pipeline.py's Runs (a RunCache: `config`, `cache`,
    `cached_only`, `progress`, `used`, `watch_times`, `search_config`, `_path`)."""

    def watched(self, long: int, uniform_scale: float, searched: bool) -> Watched:
        """Figure 18: every configured embedded model's watched pretraining, and the figures' λ(h) search
        at `long` from `uniform_scale` watched (`searched`: λ(h) were searched, not given)."""
        from entropy_lens.runs.configs import HeadSearchConfig

        c = self.config
        models = {"NoPE": c.nope, "RoPE": c.rope, **({"ALiBi": c.alibi} if c.alibi else {})}
        runs, missing = {}, {}
        for name, model in models.items():
            run, file = self._watched_training(name, model)
            if run is not None or file is not None:
                runs[name] = run
            if run is None and file is not None:
                missing[name] = file
        search = search_file = scales = None
        if searched:
            config = self.search_config(c.nope, long, uniform_scale)
            search, search_file = self._watched_search(config)
            scales = None if search is None else np.asarray(search.meta["search"]["scales"], dtype=np.float64)
        clamp = HeadSearchConfig(model=c.nope, length=long).lower_bound
        return Watched(runs, missing, search, search_file, scales, clamp)

    def _watched_training(self, name: str, model: str) -> tuple[WatchedRun | None, str | None]:
        """(the run, its cache file's name); (None, None) for a model train-tiny did not make, (None,
        name) for one not cached under `cached_only`."""
        from entropy_lens.training import TinyRecipe
        from entropy_lens.training.training_record import training_record

        record = training_record(model)
        if record is None:
            return None, None
        recipe = TinyRecipe(**record["recipe"]).pretraining()
        path = watch_path(self.cache, "watch", training_key(recipe))
        if not path.is_file():
            if not self.config.watch_training:
                return None, None
            if self.cached_only:
                return None, path.name
            self._train_watched(recipe, path)
        history = load_history(path)
        self.used.append(path)
        facts = history.meta["training"]
        self.watch_times[path.name] = {"wall_s": facts.get("wall_s"), "threads": facts.get("threads")}
        embedded = [r for r in record["log"] if r["step"] <= recipe.steps]
        run = WatchedRun(
            name=name,
            file=path.name,
            history=history,
            log=facts["log"],
            embedded_log=embedded,
            steps=recipe.steps,
            threads=facts.get("threads"),
            embedded_threads=(record.get("init_from") or record).get("threads"),
        )
        return run, path.name

    def _train_watched(self, recipe, path: Path) -> None:
        """Run the watched pretraining into a folder beside `path`, keep its history, drop the folder."""
        from entropy_lens.monitor.settings import MonitorSettings
        from entropy_lens.training import train_tiny

        work = path.with_name(path.stem + ".run")
        if self.progress:
            print(f"train-tiny --kind {recipe.kind} --monitor (pretraining, {recipe.steps} steps) -> {path}")
        monitor = MonitorSettings(monitor=",".join(WATCH_STATS), monitor_every=TRAIN_EVERY)
        train_tiny(recipe, work, progress=self.progress, monitor=monitor)
        adopt_training(work, self.cache)
        shutil.rmtree(work)

    def _watched_search(self, config) -> tuple[History | None, str]:
        """(the watched search's history, its cache file's name); None for one not cached under
        `cached_only`."""
        from entropy_lens.monitor.settings import MonitorSettings
        from entropy_lens.training.head_search import search_head_scales

        key = {
            **config.cache_key(),
            "watch": WATCH_VERSION,
            "stats": list(WATCH_STATS),
            "every": SEARCH_EVERY,
        }
        path = watch_path(self.cache, "watch-heads", key)
        if not path.is_file():
            if self.cached_only:
                return None, path.name
            if self.progress:
                print(f"search-heads {config.model} len {config.length} --monitor -> {path}", flush=True)
            monitor = MonitorSettings(monitor=",".join(WATCH_STATS), monitor_every=SEARCH_EVERY)
            found = search_head_scales(config, progress=self.progress, monitor=monitor)
            history = found.history
            history.meta = {
                **history.meta,
                "search": {
                    "scales": np.asarray(found.scales).tolist(),
                    "log": found.log,
                    "wall_s": found.wall_s,
                },
                "cache_key": key,
            }
            history.save(path)
        self.used.append(path)
        history = load_history(path)
        self.watch_times[path.name] = {"wall_s": history.meta["search"].get("wall_s"), "threads": None}
        return history, path.name
