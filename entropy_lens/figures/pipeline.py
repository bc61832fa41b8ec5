"""The runs behind `entropy-lens figures`: every scan, sweep and head-scale search the paper's figures
need, run or reused from a cache (figures/cache.py) when the typed record
(`entropy_lens.figures.record.FigureData`) first reads it, so a figure drawn alone resolves only its own
runs; `make_figures` draws every figure, or the ones named, through `entropy_lens.figures.render`.
This is the paper's pipeline: it sits above the run code (`entropy_lens.runs`), which knows nothing of it.

Lengths are multiples of the NoPE model's training length L, as in the paper: Figures 1–3 at
`short`·L (the paper's 4K = 2L), Figures 4, 5 and 10–12 at `long`·L (8K = 4L), Figure 7's sweeps (the
NoPE model and its `early` checkpoint) at `fit`·L (16K = 8L), Table 2's sliding-window perplexity at
L, 2L, ..., fit·L. The default runs the embedded tiny pair; a YAML/JSON config or flags name real
checkpoints instead. Every intermediate lands in `cache` (default `figures/runs`, where the runs
behind the committed figures are committed; `cached_only` runs nothing) under a name that hashes its settings,
so a rerun reuses what is done and a changed setting never reads a stale file; scans and sweeps
resume where they stopped.

The uniform scale s* of Figures 4 and 11 (and the start of Figure 10's λ(h) search) is the sweep's
best single scale for the last half-span [3.5L, 4L) of 4L sequences (`analysis.best_uniform_scale`);
Figure 3's λ(h) are searched at 2L from the best scale for [1.5L, 2L), as the paper's hs4k. Each
search runs the paper's 200 steps.

Every deliberate difference from the paper is listed per figure in the README the figures command
writes (`entropy_lens.figures.differences`).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.figures.cache import RunCache
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import (
    Ablation,
    Ablations,
    BeyondEntropy,
    ComputeTime,
    FigureData,
    HeadScales,
    KeysReceived,
    PasskeyPanel,
    Passkeys,
    Published,
    Schedules,
    SweepFit,
)
from entropy_lens.figures.watching import WatchedRuns

__all__ = ["CACHE", "FiguresConfig", "Runs", "compute_time", "figure_data", "make_figures"]


class Runs(WatchedRuns, RunCache):
    """The scans, sweep and search behind the figures (each cached: figures/cache.py), composed into the
    parts of the figures' record, each part when the record first reads it."""

    def compute_time(self) -> ComputeTime:
        """How long every run resolved so far took, as their results record it."""
        return compute_time(self.metas, self.passkey_records, self.search_files, self.watch_times)

    def train_len(self) -> int:
        """L: the NoPE model's training length, set or declared by its checkpoint."""
        from entropy_lens.models import declared_train_len

        L = self.config.train_len or declared_train_len(self.config.nope)
        if not L:
            raise EntropyLensError(f"{self.config.nope} declares no training length; pass --train-len L")
        return L

    def clamp(self, length: int) -> float:
        """The searches' lower bound on λ(h)·√d at `length`: the focus bound λ(h) ≥ 1/√d."""
        from entropy_lens.runs.configs import HeadSearchConfig

        return HeadSearchConfig(model=self.config.nope, length=length).lower_bound

    def beyond(self, fit_len: int, scale: float) -> BeyondEntropy:
        """Figure 17: scans with every row statistic (--stats all) of NoPE, NoPE with λ = s*/√d, RoPE and
        ALiBi at `fit_len`, and of the real model at real_multiple × its training length (one window per
        forward pass: 16K rows of a 135M model), each kept binned."""
        from entropy_lens.models import declared_train_len

        c = self.config
        kw = {"stats": "all", "first_keys": c.first_keys, "bins": c.stat_bins}
        models = {"NoPE": (c.nope, {}), "NoPE s*": (c.nope, {"scale": scale}), "RoPE": (c.rope, {})}
        models |= {"ALiBi": (c.alibi, {})} if c.alibi else {}
        tiny = {name: self.curves(model, fit_len, **kw, **more) for name, (model, more) in models.items()}
        real, real_L = None, None
        if c.real:
            real_L = c.real_train_len or declared_train_len(c.real)
            if not real_L:
                raise EntropyLensError(
                    f"{c.real} declares no training length; set real_train_len (its context, e.g. 8192)"
                )
            real = self.curves(
                c.real, c.real_multiple * real_L, samples=c.real_samples, batch_size=1, train_len=real_L, **kw
            )
        return BeyondEntropy(scale=scale, tiny=tiny, real=real, real_train_len=real_L)

    def received(self, length: int, scale: float) -> KeysReceived:
        """Figure 19: NoPE, RoPE and NoPE with λ = `scale`/√d at `length`, each scan recording the
        attention every key receives (received, received_mean) from the rows beyond L alone."""
        c = self.config
        window = length - self.train_len()
        kw = {"stats": "received,received_mean", "query_window": window}
        models = {
            "NoPE": (c.nope, {}),
            "RoPE": (c.rope, {}),
            f"NoPE λ={scale:g}/√d": (c.nope, {"scale": scale}),
        }
        runs = {name: self.scan(model, length, **kw, **more) for name, (model, more) in models.items()}
        return KeysReceived(scale=scale, window=window, runs=runs)

    def head_scales(self, given: str | None, length: int, uniform) -> HeadScales:
        """The λ(h) at `length`: the file or checkpoint `given`, else searched from s* (`uniform`)."""
        # absolute, so the scans' settings (and the cache names) do not depend on the working directory
        file = str(Path(given or self.search(self.config.nope, length, uniform.scale)).resolve())
        init = None if given else self.inits[length]
        return HeadScales(length=length, file=file, given=given, uniform=uniform, init=init)

    def figure7(self, model: str, L: int, fit_len: int) -> SweepFit:
        """The sweep of `model` at `fit_len`, the fit to its raw argmin as the paper's and the fit to
        smoothed curves: Figure 7's right panel for the NoPE model, its left for the early checkpoint
        (the paper: 10K of 50K steps). A raw argmin on a refused grid edge is an error."""
        from entropy_lens.analysis import fit_scale_curve, grid_edge_problem
        from entropy_lens.models import declared_train_len
        from entropy_lens.training.training_record import passkey_phase_steps, training_steps

        c = self.config
        if c.train_len is None and declared_train_len(model) != L:
            raise EntropyLensError(
                f"{model} declares training length {declared_train_len(model)}, the NoPE model {L}; pass "
                "an early checkpoint of the NoPE model's own run (or --train-len L)"
            )
        sweep = self.sweep(model, fit_len)
        fit = fit_scale_curve(sweep, train_len=L)
        problem = grid_edge_problem(fit, edges=c.refuse_grid_edges, tolerance=c.grid_edge_tolerance)
        if problem:
            raise EntropyLensError(
                f"Figure 7 ({model}), sweep {c.sweep_scales}: {problem} (sweep_scales); or leave that edge "
                "out of refuse_grid_edges (or raise grid_edge_tolerance) to draw the figure and report the count"
            )
        smoothed = fit_scale_curve(sweep, train_len=L, smooth=c.fit_smooth) if c.fit_smooth else None
        return SweepFit(
            model=model,
            steps=training_steps(model),
            passkey_steps=passkey_phase_steps(model),
            sweep=sweep,
            fit=fit,
            fit_smoothed=smoothed,
        )

    def schedules(self, final: SweepFit, head_scales: str, L: int, fit_len: int) -> Schedules:
        """§2.4's negative claim at `fit_len`, loss only, with the sweep's windows: a piecewise scale
        (1 inside L, beyond it the best single scale for [L, fit_len)) and the log schedule with
        Figure 7's fitted a, each alone and the log one on top of λ(h)."""
        from entropy_lens.analysis import best_uniform_scale

        c = self.config
        beyond = best_uniform_scale(final.sweep, length=fit_len, span=(L, fit_len))
        a = max(final.fit.a, 0.0)  # a schedule must not shrink the scale; a negative fit is reported as such

        def run(**kw):
            return self.scan(c.nope, fit_len, samples=c.sweep_samples, entropy="none", **kw)

        return Schedules(
            uniform=beyond,
            a=a,
            piecewise=run(scale_schedule=f"piecewise:{beyond.scale:g}"),
            log=run(scale_schedule=f"log:{a:.4g}"),
            heads=run(head_scales=head_scales),
            heads_log=run(head_scales=head_scales, scale_schedule=f"log:{a:.4g}"),
        )

    def published(self, schedules: Schedules, head_scales: str, L: int, fit_len: int) -> Published:
        """The published schedules at `fit_len`, each with its own constants and with its a replaced by
        Figure 7's fitted one (as Figure 13's log schedule: 0 where the fit is negative), beside NoPE,
        the best uniform scale for [L, fit_len) and λ(h); entropy kept (mean over heads)."""
        c, a = self.config, schedules.a

        def run(**kw):
            return self.scan(c.nope, fit_len, samples=c.sweep_samples, entropy="mean", **kw)

        specs = {  # Llama 4's floor F = 8192 is past every position here: the fitted variant puts it at L
            "llama4 (published)": "llama4",
            "llama4 (fitted a, F = L)": f"llama4:{a:.4g},{L}",
            "qwen-logn (published)": "qwen-logn",
            "qwen-logn (fitted a)": f"log:{a:.4g}",  # ln(i + 1)/ln L is 1 + ln((i + 1)/L)/ln L: a = 1/ln L
            "yarn (published)": "yarn",
            "yarn (fitted a)": f"yarn:{a / 2:.4g}",  # (1 + C ln s)² ≈ 1 + 2C ln s: C = a/2
        }
        runs = {
            "NoPE": run(),
            "uniform": run(scale=schedules.uniform.scale),
            "λ(h)": run(head_scales=head_scales),
            **{label: run(scale_schedule=spec) for label, spec in specs.items()},
        }
        return Published(a=a, runs=runs, schedules=specs)

    def passkeys(self, L: int, hs: HeadScales, hs_short: HeadScales, ablations: Ablations) -> Passkeys:
        """Figures 6, 8 and 9: passkey retrieval at `passkey_lengths` × L of the paper's panels, each with
        its context length: RoPE and NoPE (L), RoPE with training-free YaRN of factor short and long (the
        paper's fine-tuned YaRN at 8K and 16K: short·L, long·L), λ(h) searched at short·L and long·L; the
        ALiBi twin (L); the λ(h) ablations searched at long·L."""
        c = self.config
        lengths = [round(x * L) for x in c.passkey_lengths]

        def panel(name: str, context: int, model: str, **kw) -> PasskeyPanel:
            return PasskeyPanel(name=name, context=context, record=self.passkey(model, lengths, **kw))

        families = [panel("RoPE", L, c.rope), panel("NoPE", L, c.nope)]
        families += [panel(f"YaRN {f}L", f * L, c.rope, rope_scaling=f"yarn:{f}") for f in (c.short, c.long)]
        families += [
            panel(f"λ(h) {h.length // L}L", h.length, c.nope, head_scales=h.file) for h in (hs_short, hs)
        ]
        alibi = panel("ALiBi", L, c.alibi) if c.alibi else None
        ablated = [("no constraint", ablations.no_constraint), ("init 1.0", ablations.init_one)]
        return Passkeys(
            families=families,
            alibi=alibi,
            ablations=[
                panel(f"λ(h) {hs.length // L}L {n}", hs.length, c.nope, head_scales=a.file)
                for n, a in ablated
            ],
        )

    def perplexity(self, L: int, variants: dict) -> dict:
        """Table 2: sliding-window perplexity at L, 2L, ..., fit·L of each variant {name: (model, ScanConfig
        keywords)}, windows every `ppl_stride` (default L/8) tokens, the last stride of each scored."""
        from entropy_lens.runs.perplexity import PerplexityConfig, perplexity

        c = self.config
        lengths = [L * 2**i for i in range(int(math.log2(c.fit)) + 1)]
        table = {}
        for name, (model, kw) in variants.items():
            config = PerplexityConfig(
                model=model,
                lengths=tuple(lengths),
                stride=c.ppl_stride or max(1, L // 8),
                samples=c.ppl_samples,
                **self._shared(),
                **kw,
            )
            table[name] = perplexity(config, scan=self.cached_scan, progress=False)
        return table

    def ablations(self, length: int, init: float) -> Ablations:
        """Table 4's ablations of the λ(h) search at `length`, each evaluated by a scan: without the
        focus constraint (lower bound 0 instead of 1/√d) and without the initialisation (from 1.0)."""
        import numpy as np

        c = self.config
        searches = {"no_constraint": (init, 0.0), "init_one": (1.0, 1.0)}
        # absolute, as the figures' own searches: one equal to those is the same file, counted once
        files = {
            name: str(Path(self.search(c.nope, length, start, lower_bound=lb, record=False)).resolve())
            for name, (start, lb) in searches.items()
        }
        scans = {name: self.scan(c.nope, length, head_scales=f) for name, f in files.items()}
        return Ablations(
            **{
                name: Ablation(
                    file=f,
                    # the searched multipliers, as the search's record beside the file holds them
                    scales=np.asarray(json.loads(Path(f + ".json").read_text())["scales"], dtype=np.float64),
                    result=scans[name],
                )
                for name, f in files.items()
            }
        )


CACHE = "figures/runs"  # the committed runs behind the committed figures: a fresh clone only redraws


def figure_data(
    config: FiguresConfig, *, cache: str | Path = CACHE, progress: bool = True, cached_only: bool = False
) -> FigureData:
    """The figures' record (`entropy_lens.figures.record.FigureData`, typed and documented field by
    field), each field run or reused from `cache` on first use (`cached_only`: refuse to run what
    `cache` lacks). The lengths are checked here, before any run."""
    data = FigureData(Runs(config, Path(cache), progress, cached_only))
    data.fit_len  # noqa: B018 (a --len shorter than Figure 4's is refused before any run)
    return data


def make_figures(
    config: FiguresConfig,
    out: str | Path = "figures",
    *,
    cache: str | Path = CACHE,
    progress: bool = True,
    cached_only: bool = False,
    only: list[str] | None = None,
) -> list[Path]:
    """Compute what is missing in `cache` (`cached_only`: refuse to), render every figure into `out`;
    returns the files written. `only`: just these items (numbers or stems, `registry.select`), from just
    the runs they read, and only their sections of out/README.md rewritten."""
    from entropy_lens.figures.registry import select
    from entropy_lens.figures.render import check_targets, render
    from entropy_lens.runs.lock import OutputLock
    from entropy_lens.runs.output import check_folder_target

    started = time.perf_counter()
    chosen = select(only) if only else None  # a misspelt name is refused before any work
    out = check_folder_target(out)
    check_targets(out, chosen)
    if not cached_only:
        check_folder_target(cache, flag="--cache")
    with OutputLock(out, folder=True):
        data = figure_data(config, cache=cache, progress=progress, cached_only=cached_only)
        if chosen is None:
            data.final  # noqa: B018 (the sweep first: a grid too narrow for Figure 7 is refused before any other run)
        written = render(data, config, out, only=chosen, splice=chosen is not None)
    if progress:
        print(f"wrote {len(written)} files to {out}/ in {time.perf_counter() - started:.0f} s", flush=True)
    return written


def compute_time(
    metas: list[dict],
    passkey_records: list[dict],
    search_files: list[str],
    watched: dict[str, dict],
) -> ComputeTime:
    """How long the runs took, from what their results record (so a rerun from the cache reports the
    original runs, not the redraw): the `metas` of scans and sweep scales, the passkey records, the
    head-scale searches' files and Figure 18's `watched` reruns (cache file name -> {"wall_s",
    "threads"} as its history records them), each distinct run once."""
    # one cached scan can serve two figures (Figure 1's scaled NoPE is one of Figure 2's family): once
    metas = list({json.dumps(m, sort_keys=True, default=str): m for m in metas}.values())
    seconds = sum(m.get("wall_time_s", 0.0) for m in metas)
    # the passkey runs: each cell's time, once per distinct run
    records = {json.dumps(r["config"], sort_keys=True): r for r in passkey_records}
    seconds += sum(cell.get("wall_s", 0.0) for r in records.values() for cell in r["results"])
    metas += [r["model"] for r in records.values()]
    unrecorded = []
    for search_file in dict.fromkeys(search_files):  # the same file once, if both searches are one
        record = json.loads(Path(search_file + ".json").read_text())
        if record.get("wall_s") is None:
            unrecorded.append(f"the head-scale search at {record['config']['length']}")
        else:
            seconds += record["wall_s"]
    seconds += sum(w["wall_s"] for w in watched.values() if w.get("wall_s") is not None)
    unrecorded += [f"the watched run {name}" for name, w in watched.items() if w.get("wall_s") is None]
    threads = sorted({m["threads"] for m in [*metas, *watched.values()] if m.get("threads")})
    runs = len(metas) + len(dict.fromkeys(search_files)) + len(watched)  # a passkey run counts once
    return ComputeTime(seconds=seconds, runs=runs, unrecorded=unrecorded, threads=threads)
