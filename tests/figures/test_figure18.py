"""Figure 18 (issue 50): the embedded models' pretraining and the λ(h) search watched. The analysis on
planted histories, the words from them, the runs on a micro recipe, and `figures 18 --cached-only` from
the committed cache."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from entropy_lens.analysis import converged_entropy_vs_scale
from entropy_lens.analysis.trajectories import (
    head_trajectories,
    logit_growth,
    loss_agreement,
    settled_step,
)
from entropy_lens.figures.registry import item
from entropy_lens.figures.watching import Watched, WatchedRun
from entropy_lens.monitor import History

ROOT = Path(__file__).parents[2]
RUNS = ROOT / "figures" / "runs"
STEPS = np.arange(10, 210, 10)  # 20 records


def planted_entropy() -> np.ndarray:
    """(20, 2, 2) nats: layer 0 head 0 collapses (3 → 0.1, below 0.5 from step 60 on), head 1 sharpens
    (4 → 1.5, at or below 2 from step 120 on, after a dip at step 50), layer 1 head 0 holds (3 → 2),
    head 1 broadens (2 → 3)."""
    e = np.zeros((len(STEPS), 2, 2))
    e[:, 0, 0] = np.where(STEPS >= 60, 0.1, 3.0)
    e[:, 0, 1] = np.where(STEPS >= 120, 1.5, 4.0)
    e[4, 0, 1] = 1.0  # step 50: a dip that does not last
    e[:, 1, 0] = np.linspace(3, 2, len(STEPS))
    e[:, 1, 1] = np.linspace(2, 3, len(STEPS))
    return e


def planted_logits() -> np.ndarray:
    m = np.ones((len(STEPS), 2, 2))
    m[:, 1, 1] = np.linspace(2, 12, len(STEPS))  # grows ×6, peaks at the last step
    m[7, 0, 0] = 20.0  # a spike at step 80
    return m


def test_head_trajectories_name_the_planted_heads_and_their_steps():
    t = head_trajectories(STEPS, planted_entropy()).set_index(["layer", "head"])
    assert t["verdict"].to_dict() == {
        (0, 0): "collapses",
        (0, 1): "sharpens",
        (1, 0): "holds",
        (1, 1): "broadens",
    }
    assert t.loc[(0, 0), "step"] == 60 and t.loc[(0, 1), "step"] == 120  # the dip at 50 did not last
    assert t.loc[(1, 0), "step"] == -1 and t.loc[(0, 1), "lowest"] == 1.0
    assert settled_step(STEPS, np.full(len(STEPS), 0.1), 0.5) == 10
    assert settled_step(STEPS, np.r_[np.zeros(19), 1.0], 0.5) is None
    with pytest.raises(ValueError, match="not \\(steps, layers, heads\\)"):
        head_trajectories(STEPS, planted_entropy()[:3])


def test_logit_growth_and_loss_agreement():
    g = logit_growth(STEPS, planted_logits())
    assert (g.first, g.final, g.peak, g.peak_step, g.peak_head) == (2.0, 12.0, 20.0, 80, (0, 0))
    assert g.final_head == (1, 1) and g.ratio == 6.0 and g.by_layer.tolist() == [1.0, 12.0]
    log = [{"step": s, "loss": 5.0 - s / 100} for s in (10, 20, 30)]
    same = loss_agreement(log, [*log, {"step": 40, "loss": 1.0}], up_to=30)
    assert same.identical and same.steps == 3 and same.max_difference == 0
    other = loss_agreement(log, [{**r, "loss": r["loss"] + (r["step"] >= 20) * 1e-3} for r in log])
    assert not other.identical and other.first_difference == 20 and other.equal == 1
    assert other.max_difference == pytest.approx(1e-3)
    assert loss_agreement(log, [], up_to=30).steps == 0


def test_converged_entropy_vs_scale_correlates_per_layer():
    scales = np.array([[1.0, 1.5, 2.0], [1.2, 1.1, 1.0]])
    table = converged_entropy_vs_scale(scales * 2, scales, lower_bound=1.0)  # entropy rises with λ(h)
    assert table.correlations["pearson_r"].tolist() == pytest.approx([1.0, 1.0])
    assert table.table["on_clamp"].sum() == 2
    with pytest.raises(ValueError, match="pass the head scales"):
        converged_entropy_vs_scale(scales[:1], scales)


def _history(entropy, logits, **meta) -> History:
    n = len(STEPS)
    ones = np.ones(n, dtype=np.int64)
    return History(STEPS, ones, ones * 64, {"entropy": entropy, "max_logit": logits}, meta)


def _watched(search: bool = True, missing_rope: bool = False) -> Watched:
    log = [{"step": int(s), "loss": 5.0 - s / 100} for s in STEPS]
    nope = WatchedRun(
        "NoPE", "watch-x.npz", _history(planted_entropy(), planted_logits()), log, log, 200, 1, 2
    )
    runs = {"NoPE": nope, "RoPE": None if missing_rope else nope}
    scales = np.array([[1.0, 1.4], [1.2, 1.8]])
    return Watched(
        runs=runs,
        missing={"RoPE": "watch-tiny-rope-128-0123456789.npz"} if missing_rope else {},
        search=_history(planted_entropy(), planted_logits()) if search else None,
        search_file="watch-heads-x.npz",
        search_scales=scales,
        clamp=1.0,
    )


def test_the_words_are_the_histories_numbers():
    from entropy_lens.figures.training import correlation_numbers, watched_numbers

    lines = watched_numbers(_watched(missing_rope=True))
    assert lines[0].startswith("NoPE: the rerun's losses equal the embedded run's exactly at all 20 logged")
    assert "1 head collapses (final entropy ≤ 0.5 nats" in lines[1]
    assert "layer 0 head 0 from step 60 (4.33 → 0.14 bits)" in lines[1]
    assert (
        "1 head sharpens (entropy at most 50% of its first record's): layer 0 head 1 from step 120"
        in lines[1]
    )
    assert "1 head holds (fall by less than half), 1 head broadens" in lines[1]
    assert (
        "2.0 at step 10 → 12.0 at step 200 (×6.00, in layer 1 head 1); its peak 20.0 at step 80" in lines[2]
    )
    assert lines[3] == "RoPE: no watched run in the cache (figures/runs/watch-tiny-rope-128-0123456789.npz)"
    assert lines[4].startswith("the λ(h) search, 4 heads, steps 10–200")
    w = _watched()
    today = SimpleNamespace(entropy=np.repeat(planted_entropy()[-1][..., None], 3, 2), length=64, meta={})
    words = correlation_numbers(w, today)
    assert (
        "from the search's converged entropy (its step 200" in words[0]
        and "today's (Figures 5/14" in words[0]
    )
    assert words[1].startswith("per layer, Pearson r from the search's entropy vs today's: layer 0 r")
    differing = [{**r, "loss": r["loss"] + 0.01} for r in w.runs["NoPE"].log]
    run = WatchedRun("NoPE", "f", w.runs["NoPE"].history, differing, w.runs["NoPE"].log, 200, 1, 2)
    from entropy_lens.figures.training import loss_words

    assert "differ from the embedded run's at 20 of 20 logged steps ≤ 200, first at step 10" in loss_words(
        run
    )


def test_the_builder_draws_a_row_per_watched_run_and_the_search(tmp_path):
    config = SimpleNamespace(seed=0)
    today = SimpleNamespace(entropy=np.repeat(planted_entropy()[-1][..., None], 3, 2), length=64, meta={})
    searched = tmp_path / "heads.safetensors"
    searched.with_name("heads.safetensors.json").write_text('{"scales": [[1.0, 1.4], [1.2, 1.8]]}')
    data = SimpleNamespace(
        watched=_watched(), long=64, L=16, long_heads=today, head_scales=SimpleNamespace(file=str(searched))
    )
    drawn = item("figure-18").draw(data, config)
    assert drawn.figure.axes[0].get_ylabel() == "entropy (bits)" and len(drawn.figure.axes) == 6
    assert len(drawn.figure.axes[0].get_lines()) == 4  # a line per head
    assert [t.get_text() for t in drawn.figure.axes[0].get_legend().get_texts()] == [
        "layer 0 (2 heads)",
        "layer 1 (2 heads)",
    ]
    assert "filled, the search's last step" in drawn.caption and len(drawn.numbers) == 3 + 3 + 2 + 1 + 2
    assert "found the λ(h) of the figures' own search (heads.safetensors) bit for bit" in drawn.numbers[8]
    alone = SimpleNamespace(watched=_watched(search=False, missing_rope=True), long=64, L=16)
    drawn = item("figure-18").draw(alone, config)
    assert len(drawn.figure.axes) == 2 and "bottom right" not in drawn.caption
    assert (
        "left out, not in the cache: RoPE (figures/runs/watch-tiny-rope-128"
        in item("figure-18").differences(alone, config)[-1]
    )
    empty = SimpleNamespace(watched=Watched({}, {}, None, None, None, 1.0))
    assert "no watched run" in item("figure-18").missing(empty, config)


@pytest.mark.slow  # two train-tiny runs
def test_the_watched_training_reruns_the_recipe_and_is_cached(text_file, tmp_path):
    """A micro train-tiny model stands for an embedded one: its pretraining is rerun with the monitor
    into the cache (the folder dropped), its losses are the model's own, and a cached-only record reads
    it back; a model without a cached history is left out under cached_only, by name."""
    from entropy_lens.figures.config import FiguresConfig
    from entropy_lens.figures.pipeline import Runs
    from entropy_lens.figures.training import loss_words
    from entropy_lens.training import TinyRecipe, train_tiny

    fields = {"hidden": 32, "intermediate": 32, "layers": 2, "heads": 2, "kv_heads": 2, "vocab": 300}
    recipe = TinyRecipe(**fields, train_len=16, batch=2, steps=20, warmup=1, data=str(text_file))
    model = train_tiny(recipe, tmp_path / "m", progress=False)
    cache = tmp_path / "cache"
    config = FiguresConfig(nope=str(model), rope=str(tmp_path / "rope"), alibi=None)
    run, name = Runs(config, cache, progress=False)._watched_training("NoPE", str(model))
    assert name.startswith("watch-tiny-nope-16-") and [p.name for p in cache.iterdir()] == [name]
    assert run.history.steps.tolist() == [10, 20] and run.history.stats == ("entropy", "max_logit")
    assert loss_words(run).startswith("NoPE: the rerun's losses equal the embedded run's exactly")
    again = Runs(config, cache, progress=False, cached_only=True)
    read, _ = again._watched_training("NoPE", str(model))
    np.testing.assert_array_equal(read.history.values["entropy"], run.history.values["entropy"])
    assert again.used == [cache / name]
    other = train_tiny(TinyRecipe(**{**recipe.__dict__, "seed": 1}), tmp_path / "o", progress=False)
    assert again._watched_training("RoPE", str(other))[0] is None
    unwatched = Runs(dataclasses.replace(config, watch_training=False), tmp_path / "none", progress=False)
    assert unwatched._watched_training("NoPE", str(model)) == (None, None)  # not rerun, not missing
    foreign = tmp_path / "foreign"  # a model folder without train-tiny's training.json
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    assert again._watched_training("ALiBi", str(foreign)) == (None, None)


@pytest.mark.slow
def test_figure18_draws_from_the_committed_cache(tmp_path):
    """`figures 18 --cached-only` from the committed runs: every watched history there is drawn, the
    others named in its words."""
    from entropy_lens.figures.pipeline import FiguresConfig, make_figures

    watched = sorted(p.name for p in RUNS.glob("watch-*.npz"))
    if not watched:
        pytest.skip("no watched history committed yet")
    cache = tmp_path / "cache"
    cache.mkdir()
    for path in RUNS.iterdir():
        (cache / path.name).symlink_to(path)
    out = tmp_path / "out"
    written = make_figures(FiguresConfig(), out, cache=cache, progress=False, cached_only=True, only=["18"])
    assert sorted(p.name for p in written) == ["README.md", "figure-18.pdf", "figure-18.png"]
    text = (out / "README.md").read_text(encoding="utf-8")
    assert "## Figure 18" in text and "nan" not in text.split("## Figure 18")[1]
    committed = (ROOT / "figures" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Figure 18") :].split("\n## ")[0]
    assert section in committed  # the committed README says what the committed runs say
