"""`entropy-lens figures` on a minimal config (the embedded pair at L = 16): every file, the cache
reused on a rerun, and bad settings rejected before any work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from figure_cases import MINIMAL

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.figures import FIGURES, TABLES
from entropy_lens.figures.pipeline import FiguresConfig, figure_data, make_figures
from entropy_lens.figures.registry import Drawn, Item, figure, items

# Runs every experiment of the figures at the minimal settings (a minute or two on 2 cores) once per
# session (conftest's `figures_made`, which notebook 02's test reads too): the tests that use it are marked
# slow, out of the inner loop (`pytest -m "not slow"`), and kept on one worker (xdist_group "figures").
pytestmark = pytest.mark.xdist_group("figures")


@pytest.fixture
def made(figures_made):
    return figures_made


@pytest.mark.slow
def test_every_figure_and_the_readme(made):
    root, code = made
    assert code == 0
    names = sorted(p.name for p in (root / "out").iterdir())
    stems = [f"figure-{n}" for n in FIGURES] + [f"table-{n}" for n in TABLES]
    assert names == sorted([f"{stem}.{e}" for stem in stems for e in ("png", "pdf")] + ["README.md"])
    readme = (root / "out" / "README.md").read_text()
    assert all(f"![Figure {int(n)}](figure-{n}.png)" in readme for n in FIGURES)
    assert all(f"![Table {int(n)}](table-{n}.png)" in readme for n in TABLES)
    assert "a = " in readme and "Pearson r" in readme and '"train_len": 16' in readme
    assert (root / "out" / "figure-01.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


EXTRA_SECTION = (
    "## Figure 99\n\n![Figure 99](figure-99.png)\n\nNoPE's loss by position.\n\n- L = 16\n\n"
    "Differences from the paper:\n\n- not in the paper\n"
)


def extra(data, c):
    """Figure 99, the item a test adds beside the registered ones: NoPE's loss by position."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot(data.nope.loss)
    return Drawn(fig, "NoPE's loss by position.", [f"L = {data.L}"])


def extra_differences(data, c):
    return ["not in the paper"]


def mtimes(cache: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def rerun(figures_made, tmp_path_factory):
    """A rerun from the made cache in the two parts that need no second drawing of every figure (most of a
    minute; the whole rerun is `rerun_everything`'s, under make test-full): every field the figures are
    drawn from resolved from the cache (`FigureData.resolve_all`, what a rerun reads), and one item
    registered beside the others (figure-99: one function and one entry, `@figure`) drawn with `only`
    (`entropy-lens figures 99`) into a copy of the made folder, its README section spliced in: (the
    cache's files' mtimes before, after, the rerun's folder)."""
    from entropy_lens.figures import registry

    root, _ = figures_made
    cache, again = root / "cache", tmp_path_factory.mktemp("rerun") / "out"
    before = mtimes(cache)
    figure_data(FiguresConfig.build(MINIMAL), cache=cache, progress=False).resolve_all()
    shutil.copytree(root / "out", again)
    registry.items()  # the builders' modules imported (registered) before the registry is copied
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
        figure("figure-99", differences=extra_differences)(extra)
        make_figures(FiguresConfig.build(MINIMAL), again, cache=cache, progress=False, only=["99"])
    return before, mtimes(cache), again


@pytest.fixture(scope="module")
def rerun_everything(figures_made, tmp_path_factory):
    """`make_figures` again at MINIMAL from the made cache, every figure drawn, with figure-99 registered
    beside the others: (the cache's files' mtimes before, after, the rerun's folder)."""
    import importlib

    # the module: the package exports its function `render` under the same name
    render = importlib.import_module("entropy_lens.figures.render")
    root, _ = figures_made
    added = Item("figure-99", extra, extra_differences)
    registered = render.items
    cache, again = root / "cache", tmp_path_factory.mktemp("rerun-everything")
    before = mtimes(cache)
    render.items = lambda: [*registered(), added]  # as a new `@figure` function would register it
    try:
        make_figures(FiguresConfig.build(MINIMAL), again, cache=cache, progress=False)
    finally:
        render.items = registered
    return before, mtimes(cache), again


def with_extra_section(readme: str) -> str:
    """`readme` with figure-99's section in the README's order (`@figure`'s registry: after the figures,
    before the tables)."""
    assert readme.count("\n## Table 2\n") == 1
    return readme.replace("\n## Table 2\n", f"\n{EXTRA_SECTION}\n## Table 2\n")


def check_rerun(made, rerun, *, in_order: bool) -> None:
    root, _ = made
    before, after, again = rerun
    assert after == before  # nothing recomputed, nothing rewritten
    readme, made_readme = (again / "README.md").read_text(), (root / "out" / "README.md").read_text()
    if in_order:  # registered with `@figure`: the made README with the added item's section in its place
        assert readme == with_extra_section(made_readme)
    else:  # put after the registered items: the made README, and the added item's section after it
        assert readme.startswith(made_readme) and readme.endswith(EXTRA_SECTION)
    made_files = sorted(p.name for p in (root / "out").iterdir())
    assert sorted(p.name for p in again.iterdir()) == sorted([*made_files, "figure-99.pdf", "figure-99.png"])


@pytest.mark.slow
def test_rerun_reuses_the_cache(made, rerun):
    """Every run the figures read is found in the cache, and an item registered beside them is drawn from it
    and put in the README in its place (after the figures, before the tables); the whole rerun, every figure drawn again (a README of the same
    text), is test_rerun_of_every_figure_reuses_the_cache's (make test-full), and every figure redrawn from
    a cache as the README's text is test_committed_readme_is_regenerated_from_the_committed_runs's."""
    check_rerun(made, rerun, in_order=True)


@pytest.mark.full
@pytest.mark.slow
def test_rerun_of_every_figure_reuses_the_cache(made, rerun_everything):
    """test_rerun_reuses_the_cache's claims of a rerun that draws every figure again (make test-full)."""
    check_rerun(made, rerun_everything, in_order=False)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"sampels": 3}, "unknown settings \\['sampels'\\]"),
        ({"short": 4, "long": 4}, "short < long"),
        (
            {"passkey_lengths": [2, 1]},
            "passkey_lengths \\[2, 1\\] must be positive multiples of L, ascending",
        ),
        ({"passkey_keys": 0}, "passkey_keys must be at least 1 and at most 1000 \\(got 0\\)"),
    ],
)
def test_bad_settings(values, match):
    with pytest.raises(EntropyLensError, match=match):
        FiguresConfig.build(values)


@pytest.mark.slow
def test_bad_config_files_and_lengths(tmp_path, capsys):
    assert main(["figures", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert main(["figures", "--config", str(tmp_path / "list.yaml")]) == 2
    assert "mapping" in capsys.readouterr().err
    config = FiguresConfig.build({**MINIMAL, "length": 32})  # Figure 7's sweep shorter than 4L = 64
    with pytest.raises(EntropyLensError, match="shorter than Figure 4"):
        make_figures(config, tmp_path / "out", cache=tmp_path / "cache", progress=False)
    missing = FiguresConfig.build({**MINIMAL, "head_scales": str(tmp_path / "none.safetensors")})
    with pytest.raises(EntropyLensError, match="head-scales"):
        make_figures(missing, tmp_path / "out", cache=tmp_path / "cache", progress=False)


def test_packaged_paper_config():
    config = FiguresConfig.from_file("paper", device="cpu")
    assert (config.train_len, config.short, config.long, config.fit) == (2048, 2, 4, 8)
    assert config.sweep_scales.endswith(":0.01") and config.refuse_grid_edges == ["upper"]
    assert config.device == "cpu"


@pytest.mark.slow
def test_readme_prints_no_nan(made):
    """An undefined statistic is printed with its reason, never as `nan`."""
    import re

    root, _ = made
    assert not re.search(r"\bnan\b", (root / "out" / "README.md").read_text(), re.IGNORECASE)


@pytest.mark.slow
def test_readme_states_the_time_the_runs_record(made):
    """The stated time is the sum of the wall times in the cached results (scans, sweep scales and the
    head-scale searches), so a rerun from the cache still states the original runs' time."""
    import glob

    import numpy as np

    root, _ = made
    readme = (root / "out" / "README.md").read_text()
    metas = [
        json.loads(str(np.load(f)["meta"]))
        for f in glob.glob(str(root / "cache" / "**" / "*.npz"), recursive=True)
        if not Path(f).name.startswith("watch-")  # Figure 18's monitor histories: their time is below
    ]
    # Figure 18's watched search (MINIMAL watches no pretraining): its history records the search's time
    watched = [json.loads(str(np.load(f)["meta"])) for f in glob.glob(str(root / "cache" / "watch-*.npz"))]
    assert watched and all("search" in m for m in watched)
    # at 4L and at 2L, and Figure 14's two ablations at 4L (one may be the 4L search itself, when s* = 1)
    searches = glob.glob(str(root / "cache" / "heads-*.safetensors.json"))
    assert 3 <= len(searches) <= 4
    passkeys = [json.loads(Path(f).read_text()) for f in glob.glob(str(root / "cache" / "passkey-*.json"))]
    # Figure 6's six panels, Figure 8's, Figure 9's two ablations (one may be the 4L λ(h) itself)
    assert 8 <= len(passkeys) <= 9
    # every cached file once, though Figure 1's scaled NoPE is also one of Figure 2's family
    assert f"Computing the {len(metas) + len(searches) + len(passkeys) + len(watched)} runs behind" in readme
    seconds = sum(m["wall_time_s"] for m in metas)
    seconds += sum(json.loads(Path(f).read_text())["wall_s"] for f in searches)
    seconds += sum(cell["wall_s"] for record in passkeys for cell in record["results"])
    seconds += sum(m["search"]["wall_s"] for m in watched)
    import re

    (minutes,) = re.findall(r"runs behind these figures took ([0-9.]+) min", readme)
    # the same sum in another order may round the other way at a .x5 boundary: within half a digit
    assert seconds > 0 and abs(float(minutes) - seconds / 60) <= 0.05 + 1e-9


@pytest.mark.slow
def test_uniform_scale_and_searches_follow_the_paper(made):
    """s* is the best single scale for the last half-span of each length; λ(h) are searched from it, at
    4L (Figures 4, 10) and at 2L (Figure 3), for the configured steps; the README states rule and value."""
    from entropy_lens.analysis import best_uniform_scale

    root, _ = made
    data = figure_data(FiguresConfig.build(MINIMAL), cache=root / "cache", progress=False)
    L = data.L
    searches = (
        (data.uniform, data.head_scales, data.long),
        (data.short_uniform, data.short_head_scales, data.short),
    )
    for uniform, hs, length in searches:
        again = best_uniform_scale(data.final.sweep, length=length, train_len=L)
        assert (uniform.scale, uniform.span) == (again.scale, again.span)
        assert uniform.span == (length - L // 2, length)
        assert hs.uniform == uniform and hs.length == length and hs.given is None
    records = {
        r["config"]["length"]: r
        for r in (json.loads(p.read_text()) for p in (root / "cache").glob("heads-*.safetensors.json"))
    }
    for uniform, hs, length in searches:
        # from s*, or from the focus bound 1 where s* lies below it (the clamp's first step would)
        assert records[length]["config"]["init"] == hs.init == max(uniform.scale, 1.0)
    assert {r["config"]["steps"] for r in records.values()} == {MINIMAL["search_steps"]}
    assert FiguresConfig().search_steps == 200
    assert str(Path(data.short_head_scales.file).name).startswith("heads-")
    readme = (root / "out" / "README.md").read_text()
    a, b = data.uniform.span
    assert f"s* = {data.uniform.scale:g}, the best single scale" in readme
    assert f"[{a / L:g}L, {b / L:g}L) = [{a}, {b})" in readme


@pytest.mark.slow
def test_figure7_fits_the_raw_argmin_and_reports_the_grid_edges(made, tmp_path):
    """The paper's fit is on the raw argmin; the smoothed one is a second line; argmins on the grid's
    edges are counted in the README, and refused, before any other run, for the edges named."""
    from entropy_lens.analysis import fit_scale_curve, grid_edge_problem

    root, _ = made
    data = figure_data(FiguresConfig.build(MINIMAL), cache=root / "cache", progress=False)
    raw, smoothed = data.final.fit, data.final.fit_smoothed
    assert raw.a == fit_scale_curve(data.final.sweep, train_len=data.L).a and raw.smooth == 0
    assert smoothed.smooth == MINIMAL["fit_smooth"]
    readme = (root / "out" / "README.md").read_text()
    assert f"raw argmin (the paper's fit): a = {raw.a:.4f} ± {raw.a_stderr:.4f}, R² = {raw.r2:.4f}" in readme
    assert (
        f"smoothed ±{smoothed.smooth}: a = {smoothed.a:.4f}" in readme and f"R² = {smoothed.r2:.4f}" in readme
    )
    n_lo, n_hi = raw.at_edge
    assert f"at its smallest scale 0.9 at {n_lo}, at its largest 1.2 at {n_hi} of the" in readme
    edges = [e for e, n in zip(("lower", "upper"), raw.at_edge) if n]
    assert edges, "4 scales and 2 windows: some raw argmin lies on an edge"
    strict = FiguresConfig.build({**MINIMAL, "refuse_grid_edges": edges})
    cache = root / "cache"
    before = sorted(p.name for p in cache.iterdir())
    with pytest.raises(EntropyLensError, match="extend the sweep's scales") as refused:
        make_figures(strict, tmp_path / "out", cache=cache, progress=False)
    assert grid_edge_problem(raw, edges=edges) in str(refused.value)
    assert sorted(p.name for p in cache.iterdir()) == before and not (tmp_path / "out" / "README.md").exists()
    with pytest.raises(EntropyLensError, match="refuse_grid_edges takes"):
        FiguresConfig.build({"refuse_grid_edges": ["top"]})


@pytest.mark.slow
def test_every_figure_lists_its_differences_from_the_paper(made):
    """Per figure a list of deliberate differences, generated from the settings and the runs."""
    import dataclasses
    import re

    from entropy_lens.figures.differences import common_differences, differences

    root, _ = made
    readme = (root / "out" / "README.md").read_text()
    data = figure_data(FiguresConfig.build(MINIMAL), cache=root / "cache", progress=False)
    config = FiguresConfig.build(MINIMAL)
    assert all(f"- {line}" in readme for line in common_differences(data, config))
    sections = re.split(r"^## ", readme, flags=re.MULTILINE)[1:]
    items = [f"figure-{n}" for n in FIGURES] + [f"table-{n}" for n in TABLES]
    assert [s.split("\n")[0] for s in sections] == [
        f"{i.split('-')[0].capitalize()} {int(i[-2:])}" for i in items
    ]
    for item, section in zip(items, sections):
        listed = section.split("Differences from the paper:\n\n")[1].strip().splitlines()
        assert listed and listed == [f"- {line}" for line in differences(item, data, config)]
    by_title = {section.split("\n")[0]: section for section in sections}
    early, final = data.early.steps, data.final.steps
    assert (
        f"the left panel is tiny-nope-step300, a checkpoint of tiny-nope's own training run at {early} of its "
        f"{final} steps ({early / final:.0%};" in by_title["Figure 7"]
    )
    assert f"tiny-nope's last {data.final.passkey_steps} steps were a passkey phase" in by_title["Figure 7"]
    assert f"uniform scale s* = {data.uniform.scale:g}" in by_title["Figure 4"]
    given = dataclasses.replace(data.head_scales, given="hs8k.safetensors", init=None)
    given = data.replace(head_scales=given)
    assert any("given (hs8k.safetensors)" in line for line in differences("figure-04", given, config))
    without = data.replace(early=None)
    assert "is left out: no early checkpoint given" in differences("figure-07", without, config)[0]


@pytest.mark.slow
def test_table2_is_the_sliding_window_perplexity_of_its_scans(made):
    """Table 2: per row and window length W = L, 2L, ..., 8L a loss-only scan of windows every L/8 tokens,
    read off its last L/8 positions; the README's cells are those numbers (3 significant digits)."""
    from entropy_lens.analysis import sliding_window_ppl

    root, _ = made
    data = figure_data(FiguresConfig.build(MINIMAL), cache=root / "cache", progress=False)
    L, stride = data.L, data.L // 8
    readme = (root / "out" / "README.md").read_text()
    assert list(data.ppl) == [
        "NoPE",
        "RoPE",
        "ALiBi",
        "RoPE NTK (dynamic:2)",
        "NoPE λ=1.2/√d",
        "NoPE λ=1.5/√d",
        "NoPE λ=1.8/√d",
        f"NoPE s*={data.uniform_scale:g}",
        "NoPE λ(h) 2L",
        "NoPE λ(h) 4L",
    ]
    rows = {
        line.split(" | ")[0][2:]: line
        for line in readme.splitlines()
        if line.startswith(("| NoPE", "| RoPE", "| ALiBi"))
    }
    for name, row in data.ppl.items():
        assert list(row) == [L, 2 * L, 4 * L, 8 * L]
        printed = [cell.split(" [")[0] for cell in rows[name].strip(" |").split(" | ")[1:]]
        for (W, cell), text in zip(row.items(), printed, strict=True):
            meta = cell.result.meta
            assert meta["scan_config"]["stride"] == stride and meta["length"] == W
            assert meta["samples"] == MINIMAL["ppl_samples"] and meta["entropy_reduction"] == "none"
            again = sliding_window_ppl(cell.result, stride)
            assert again == cell.ppl
            # the random ALiBi model's perplexity is printed as the paper prints one beyond a thousand
            assert again.ppl >= 1e3 if text == "> 10³" else float(text) == float(f"{again.ppl:.3g}")


@pytest.mark.slow
def test_figure7_has_the_early_checkpoint_panel(made):
    """Figure 7's left panel: the same sweep and fits for tiny-nope after 300 of its 1500 pretraining
    steps; the right panel's steps count the passkey phase after those, as training.json records it."""
    from entropy_lens.analysis import fit_scale_curve

    root, _ = made
    data = figure_data(FiguresConfig.build(MINIMAL), cache=root / "cache", progress=False)
    early = data.early.sweep
    assert early.meta[0]["model"] == "tiny-nope-step300" and early.length == data.final.sweep.length
    assert data.early.fit.a == fit_scale_curve(early, train_len=data.L).a
    training = Path(__file__).parents[2] / "entropy_lens" / "models" / "tiny" / "tiny-nope" / "training.json"
    recipe = json.loads(training.read_text())["recipe"]
    phase = recipe["passkey_steps"]
    assert phase > 0 and data.final.passkey_steps == phase
    assert (data.final.model, data.final.steps) == ("tiny-nope", recipe["steps"] + phase)
    assert (data.early.model, data.early.steps, data.early.passkey_steps) == ("tiny-nope-step300", 300, 0)
    readme = (root / "out" / "README.md").read_text()
    assert f"300 steps, raw argmin (the paper's fit): a = {data.early.fit.a:.4f}" in readme
    right = f"{data.final.steps} steps ({recipe['steps']} pretraining + {phase} passkey)"
    assert f"{right}, raw argmin (the paper's fit): a = {data.final.fit.a:.4f}" in readme


@pytest.mark.slow
def test_passkey_figures_are_the_passkey_runs_of_their_variants(made):
    """Figures 6, 8 and 9: one passkey run per panel, of the model and variant the panel names, at
    passkey_lengths × L; the README's numbers are the records' accuracies, and Figure 16's table holds
    each model's accuracy with its interval and its retrieval head's mass."""
    from entropy_lens.analysis import passkey_average, passkey_by_length, passkey_table

    root, _ = made
    data = figure_data(FiguresConfig.build(MINIMAL), cache=root / "cache", progress=False)
    L, pk = data.L, data.passkeys
    hs, hs_short = Path(data.head_scales.file).resolve(), Path(data.short_head_scales.file).resolve()
    expected = [  # (name, context, model, rope_scaling, head_scales)
        ("RoPE", L, "tiny-rope", None, None),
        ("NoPE", L, "tiny-nope", None, None),
        ("YaRN 2L", 2 * L, "tiny-rope", "yarn:2", None),
        ("YaRN 4L", 4 * L, "tiny-rope", "yarn:4", None),
        ("λ(h) 2L", 2 * L, "tiny-nope", None, hs_short),
        ("λ(h) 4L", 4 * L, "tiny-nope", None, hs),
        ("ALiBi", L, MINIMAL["alibi"], None, None),
        (
            "λ(h) 4L no constraint",
            4 * L,
            "tiny-nope",
            None,
            Path(data.ablations.no_constraint.file).resolve(),
        ),
        ("λ(h) 4L init 1.0", 4 * L, "tiny-nope", None, Path(data.ablations.init_one.file).resolve()),
    ]

    def named(stored):  # a record names its head-scales file from its own folder, the cache (issue 70)
        assert stored is None or not Path(stored).is_absolute(), stored
        return None if stored is None else (root / "cache" / stored).resolve()

    got = [
        (p.name, p.context, p.record["config"]["model"], p.record["config"]["rope_scaling"])
        + (named(p.record["config"]["head_scales"]),)
        for p in pk.panels
    ]
    assert got == expected and pk.heads is pk.families[5]
    readme = (root / "out" / "README.md").read_text()
    for panel in pk.panels:
        config = panel.record["config"]
        assert config["lengths"] == [13 * L, 16 * L] and (config["depths"], config["keys"]) == (2, 1)
        assert config["train_len"] == L and config["seed"] == 42
        table = passkey_table(panel.record)
        by_length = ", ".join(f"{w} {table[w].mean():.2f}" for w in table.columns)
        assert f"- {panel.name} (context {panel.context}): " in readme and by_length in readme
    with pytest.raises(EntropyLensError, match="no passkey length is within"):
        passkey_average(passkey_table(pk.alibi.record), L)  # every prompt is longer than L = 16
    nope = passkey_by_length(pk.families[1].record, 13 * L)
    row = next(line for line in readme.splitlines() if line.startswith("| NoPE | "))
    first = nope.iloc[0]
    assert row.startswith(f"| NoPE | {first['head']} | {first.accuracy:.2f} [{first.accuracy_low:.2f}–")
    assert f"; {first.needle_mass:.2f} ± " in row


@pytest.mark.slow
def test_cached_only_redraws_and_names_what_is_missing(made, tmp_path, capsys):
    """From the cache a run made, --cached-only draws an item as that run drew it (one item here: the
    lookups are the plain rerun's, which test_rerun_reuses_the_cache finds all cached, and every item
    redrawn --cached-only is test_committed_readme_is_regenerated_from_the_committed_runs); from an empty
    cache it names the first run missing and writes nothing."""
    import re

    root, _ = made
    config = FiguresConfig.build(MINIMAL)
    redrawn = tmp_path / "redrawn"
    make_figures(config, redrawn, cache=root / "cache", progress=False, cached_only=True, only=["table-02"])
    assert sorted(p.name for p in redrawn.iterdir()) == ["README.md", "table-02.pdf", "table-02.png"]
    assert (redrawn / "table-02.pdf").read_bytes() == (root / "out" / "table-02.pdf").read_bytes()

    def section(text):  # Table 2's section: from its title to the next one (or the end)
        return re.search(r"^## Table 2\n.*?(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL).group(0)

    again, made_readme = (redrawn / "README.md").read_text(), (root / "out" / "README.md").read_text()
    assert section(again) == section(made_readme) and "| NoPE |" in section(again)
    args = ["figures", "--config", str(root / "minimal.yaml"), "--out", str(tmp_path / "out")]
    assert main([*args, "--cache", str(tmp_path / "empty"), "--cached-only", "--quiet"]) == 2
    assert "the sweep of tiny-nope at 128 is not in the cache" in capsys.readouterr().err
    assert not (tmp_path / "out" / "README.md").exists() and not any((tmp_path / "empty").rglob("*.npz"))


@pytest.mark.slow
def test_committed_readme_is_regenerated_from_the_committed_runs(tmp_path_factory):
    """Every number in figures/README.md comes from the runs committed in figures/runs: redrawn from them
    with the default settings, run nothing (docs/paper.md's `entropy-lens figures --cached-only`, run once
    for this test and that page's, figure_cases.redraw_committed), the README is the same text and every
    figure the same drawing: its PDF byte for byte, its PNG pixel for pixel within one level of a channel
    (Agg's antialiasing of a marker's edge can differ by one level between CPUs: figure-05.png does between
    two of ours)."""
    import numpy as np
    from figure_cases import redraw_committed
    from PIL import Image

    root = Path(__file__).parents[2]
    folder, code, err = redraw_committed(tmp_path_factory)
    assert code == 0, err[-2000:]
    redrawn = folder / "figures"
    assert (redrawn / "README.md").read_text() == (root / "figures" / "README.md").read_text()
    drawn = sorted(p.name for p in redrawn.glob("*.p[dn][fg]"))
    assert drawn == sorted(p.name for p in (root / "figures").glob("*.p[dn][fg]"))
    for name in drawn:
        new, old = redrawn / name, root / "figures" / name
        if name.endswith(".pdf"):
            assert new.read_bytes() == old.read_bytes(), name
        else:
            a, b = (np.asarray(Image.open(p).convert("RGBA"), dtype=np.int16) for p in (new, old))
            assert a.shape == b.shape and np.abs(a - b).max() <= 1, name


def test_the_registry_lists_every_figure_the_readme_names():
    """Every figure and table is registered once (`@figure`), and the registry's order is the README's."""
    import re

    root = Path(__file__).parents[2] / "figures"
    readme = (root / "README.md").read_text()
    registered = items()
    assert re.findall(r"^## (.+)$", readme, flags=re.MULTILINE) == [i.title for i in registered]
    # the default settings draw every item (the embedded trio can do the passkey task); one left out says
    # why in one line
    undrawn = re.findall(r"^## (.+)\n\nNot drawn: .+\.\n", readme, flags=re.MULTILINE)
    assert undrawn == []
    drawn = [i for i in registered if i.title not in undrawn]
    assert re.findall(r"^!\[[^]]+\]\((\S+)\.png\)$", readme, flags=re.MULTILINE) == [i.stem for i in drawn]
    stems = [f"figure-{n}" for n in FIGURES] + [f"table-{n}" for n in TABLES]
    assert [i.stem for i in registered] == stems and len(set(stems)) == len(stems)
    assert all((root / f"{i.stem}.png").is_file() and (root / f"{i.stem}.pdf").is_file() for i in drawn)
    assert not any((root / f"{i.stem}.png").exists() for i in registered if i.title in undrawn)
    with pytest.raises(ValueError, match="figure-NN"):
        figure("fig-7", differences=lambda data, c: [])


@pytest.mark.slow
def test_a_figure_is_one_function_and_one_entry(made, rerun):
    """An item beside the registered ones is drawn, saved and given its README section, nothing else (the
    rerun of test_rerun_reuses_the_cache draws one: the fixture `rerun`)."""
    root, _ = made
    _, _, again = rerun
    readme = (again / "README.md").read_text()
    assert readme == with_extra_section((root / "out" / "README.md").read_text())
    assert (again / "figure-99.png").is_file() and (again / "figure-99.pdf").is_file()


def test_figure17_words_its_numbers_from_the_runs():
    """Figure 17 on planted curves (tests/beyond_inputs.py): the README's statements are the curves'
    numbers, the head that fades fastest, the sink metric and the exponent named as planted; the real
    model's row says how many windows it took and why."""
    import dataclasses
    import re
    from types import SimpleNamespace

    import matplotlib.pyplot as plt
    import numpy as np
    from beyond_inputs import planted_curves

    from entropy_lens.analysis.beyond import fading_exponent
    from entropy_lens.figures.beyond import beyond_comparisons, beyond_numbers, times
    from entropy_lens.figures.record import BeyondEntropy
    from entropy_lens.figures.registry import item

    L = 16
    tiny = {
        name: planted_curves(model=m)
        for name, m in [("NoPE", "tiny-nope"), ("NoPE s*", "tiny-nope"), ("RoPE", "tiny-rope")]
    }
    real = planted_curves(L=64, T=128, width=4, model="smollm2", samples=2, wall_time_s=1800.0)
    b = BeyondEntropy(scale=1.65, tiny=tiny, real=real, real_train_len=64)
    numbers = beyond_numbers(b, L)
    assert len(numbers) == 3 * 4 and numbers[1].startswith("NoPE λ=1.65/√d (s*), [L/2, L) → [7.5L, 8L)")
    c = tiny["NoPE"]
    p0, p1 = c.span("max_prob", 8, 16).mean(), c.span("max_prob", 120, 128).mean()
    assert (
        f"max probability {p0:.3f} → {p1:.3f} (×{p1 / p0:.2f}, α = {fading_exponent(c, L):+.2f})"
        in numbers[0]
    )
    reach = [c.span("distance", a, b).mean() / ((a + b - 1) / 2) for a, b in [(8, 16), (120, 128)]]
    assert reach == pytest.approx([(5 * 0.3 + 0.45) / 6] * 2)  # five heads look back 0.3 i, one 0.45 i
    assert f"{reach[0]:.2f} → {reach[1]:.2f} of the bound i" in numbers[0]
    assert "max probability falls most in layer 1 head 2" in numbers[4]  # the planted fast head
    assert "the head looking farthest back is layer 1 head 0 (0.45 of i)" in numbers[4]
    assert "varentropy changes most in layer 1 head 0 (+0.50 nats²)" in numbers[4]
    assert "smollm2, by head" in numbers[7] and "by layer (mean over its heads), 0 ×" in numbers[7]
    # the sink metric: 1 of the 6 heads holds 0.5 > ε on the first token everywhere
    assert "17% over rows [0, 64), 17% over rows [8, 16), 17% over rows [120, 128) (of 6)" in numbers[8]
    assert "layer 0 head 1, 0.5 → 0.5" in numbers[8]
    every = planted_curves(fast=(slice(None), slice(None)))  # every head fades as a uniform row would
    assert fading_exponent(every, L) == pytest.approx(-1.0, abs=1e-6)
    comparisons = beyond_comparisons(b, L)
    assert [line.split(" ")[0] for line in comparisons] == [
        "Scalable-Softmax",
        "Attention",
        "entropix",
        "Rényi-2:",
    ]
    assert "the mean max probability falls for NoPE (×" in comparisons[0]
    # Scalable-Softmax's own vector over the same spans: e⁵/(e⁵ + i) averaged over each, by hand
    toy = [np.mean(np.e**5 / (np.e**5 + np.arange(a, b))) for a, b in [(8, 16), (120, 128)]]
    assert f"falls {times(toy[1] / toy[0])} from [L/2, L) to [7.5L, 8L) at L = 16" in comparisons[0]
    assert (times(0.7612), times(1.444), times(0.00531)) == ("×0.76", "×1.44", "×0.0053")
    assert "NoPE 17%" in comparisons[1] and "here it falls for" not in comparisons[1]  # planted: flat
    assert f"NoPE {0.2 * c.span('entropy', 8, 16).mean():.2f} →" in comparisons[3]  # H − H₂ = 0.2 H
    assert not re.search(r"\bnan\b", " ".join(numbers + comparisons))
    data = SimpleNamespace(beyond=b, L=L)
    config = FiguresConfig.build({"train_len": L})
    drawn = item("figure-17").draw(data, config)
    assert len(drawn.figure.axes) == 10 and drawn.numbers == numbers + comparisons
    assert (
        "s* = 1.65, Figure 4's" in drawn.caption
        and "smollm2 at 2× its context 64 (2 window(s))" in drawn.caption
    )
    different = item("figure-17").differences(data, config)
    assert (
        "2 window(s) of austen:persuasion (the embedded models: 128); the scan took 30 min (15 min per window)"
        in different[2]
    )
    # with the text's token count recorded: how many windows it holds; a short wall time in s
    whole = dataclasses.replace(
        real,
        meta={
            **real.meta,
            "data_description": "austen:persuasion (1 document, 400 tokens)",
            "wall_time_s": 190.0,
        },
    )
    whole_data = SimpleNamespace(beyond=dataclasses.replace(b, real=whole), L=L)
    assert (
        "at 2× its context: 2 of the 3 non-overlapping windows of 129 tokens (--len + 1) that austen:persuasion "
        "holds (the embedded models: 128); the scan took 3 min (95 s per window)"
        in item("figure-17").differences(whole_data, config)[2]
    )
    plt.close(drawn.figure)
    alone = item("figure-17").draw(SimpleNamespace(beyond=BeyondEntropy(1.65, tiny, None, None), L=L), config)
    assert len(alone.figure.axes) == 5 and "bottom" not in alone.caption
    assert (
        "real: null"
        in item("figure-17").differences(
            SimpleNamespace(beyond=BeyondEntropy(1.65, tiny, None, None), L=L), config
        )[2]
    )
    plt.close(alone.figure)
