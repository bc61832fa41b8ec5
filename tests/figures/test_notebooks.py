"""The notebooks run headlessly and are committed without outputs.

Each notebook is executed with nbclient in a kernel that runs this interpreter (a `python3` kernelspec
written to a temporary JUPYTER_PATH, so a user-wide spec pointing at another Python cannot be picked
up), with cwd = notebooks/ as in Jupyter. Notebook 01 runs once, as committed with one cell appended
(tools/tutorial_outputs.py's run, which the site's outputs are compared with too); notebook 02 gets the minimal
figure settings of test_figures.py and a cache in tmp_path in place of its `parameters` cell.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

# found here, imported by the tests that use them (nbformat's import, jsonschema's, takes seconds: not
# at collection, in every worker)
for _needed in ("nbformat", "nbclient", "ipykernel"):
    if importlib.util.find_spec(_needed) is None:
        pytest.skip(f"{_needed} is not installed: pip install -e '.[notebooks]'", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "docs" / "tutorials" / "executed"
NAMES = ["01_quickstart.ipynb", "02_paper_figures.ipynb"]


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A `python3` kernelspec for this interpreter, first on JUPYTER_PATH; figures drawn inline."""
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (entropy_lens tests)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # an Agg backend would leave no image outputs
    return "python3"


def execute(nb, kernel_name: str):
    """Run every cell (an error in any cell raises CellExecutionError) and return the notebook."""
    import nbclient

    client = nbclient.NotebookClient(
        nb, kernel_name=kernel_name, timeout=300, resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    return nb


def outputs(cell) -> str:
    """A code cell's printed text and the plain/HTML text of what it displayed."""
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream" and out.name == "stdout":
            parts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            parts += [out.data.get("text/plain", ""), out.data.get("text/html", "")]
    return "\n".join(parts)


def n_images(cell) -> int:
    return sum("image/png" in out.get("data", {}) for out in cell.outputs)


def cell_with(nb, text: str):
    """The one code cell whose source contains `text`."""
    found = [c for c in nb.cells if c.cell_type == "code" and text in c.source]
    assert len(found) == 1, f"{len(found)} code cells contain {text!r}"
    return found[0]


def tutorial_outputs():
    """tools/tutorial_outputs.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("tutorial_outputs", ROOT / "tools" / "tutorial_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PREFIX_CELL = "import sys\nprint('kernel prefix:', sys.prefix)"


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """Notebook 01 run once for the two tests that read it, as tools/tutorial_outputs.py runs it (its own
    `python3` kernelspec for this interpreter, cwd = notebooks/), with one cell appended that prints the
    kernel's prefix."""
    import nbformat

    nb = nbformat.read(NOTEBOOKS / "01_quickstart.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PREFIX_CELL))
    path = tmp_path_factory.mktemp("quickstart") / "01_quickstart.ipynb"
    nbformat.write(nb, path)
    nb = tutorial_outputs().execute(path)  # an error in any cell raises
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    return nb


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart")  # one worker runs notebook 01 (the fixture `quickstart`)
def test_quickstart_runs(quickstart):
    nb = quickstart
    assert nb.cells[-1].source == PREFIX_CELL
    assert f"kernel prefix: {sys.prefix}" in outputs(nb.cells[-1])  # the kernel ran this interpreter

    summary = outputs(cell_with(nb, "print(summary("))
    assert "entropy (nats)" in summary and "loss (nats)" in summary
    rows = dict(re.findall(r"^(\[.+?\))\s+\[\d+, \d+\)\s+(\S+)\s+\S+$", summary, flags=re.MULTILINE))
    assert list(rows) == [
        "[0, L/2)",
        "[L/2, L)",
        "[L, 2L)",
        "[2L, 3L)",
        "[3L, 4L)",
    ]  # spans of L = 128 up to 4L
    assert float(rows["[3L, 4L)"]) > float(rows["[L/2, L)"])  # entropy disperses beyond L

    assert n_images(cell_with(nb, "entropy_loss(")) == 1
    assert n_images(cell_with(nb, "imshow(")) == 1
    spans = outputs(cell_with(nb, "display(by_span("))
    assert "Δ loss (nats)" in spans and "Δ entropy (bits)" in spans and "[3L, 4L)" in spans
    assert n_images(cell_with(nb, "moving_average(other.loss")) == 1

    (page,) = [
        o.data["text/html"] for o in cell_with(nb, "view([").outputs if "text/html" in o.get("data", {})
    ]
    assert page.startswith("<iframe") and "srcdoc=" in page  # the whole page, saved with the notebook
    assert "NoPE λ=1.4/√d" in page and "entropy-lens-data" in page


@pytest.mark.slow
@pytest.mark.xdist_group("figures")  # on the worker that runs the figures once (conftest's figures_made)
def test_paper_figures_run(kernel, figures_made):
    """With the cache of test_figures.py's run of the same settings: the notebook computes nothing anew,
    it reads the runs and draws them (what a reader with a filled cache does)."""
    import nbformat
    from figure_cases import MINIMAL

    root, code_ = figures_made
    assert code_ == 0
    nb = nbformat.read(NOTEBOOKS / "02_paper_figures.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    cache = root / "cache"
    code[0].source = f"SETTINGS = {MINIMAL!r}\nCACHE = {str(cache)!r}"
    before = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    execute(nb, kernel)
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == before  # all read

    # One image per figure: 1, 2, 3, 4, 5, 7 (both checkpoints in one), the three grids 10-12, Table 2.
    assert sum(n_images(c) for c in code) == 10
    assert all(
        n_images(cell_with(nb, call)) == 1
        for call in (
            "entropy_loss(list(fig1",
            "models_by_layers(",
            "entropy_loss(list(fig4",
            "scale_vs_entropy(",
            "best_scale_by_position(",
            "perplexity_by_length(",
        )
    )
    assert n_images(cell_with(nb, "all_heads_grid(")) == 3
    assert "entropy_inflection" in outputs(cell_with(nb, "inflection_table(fig1"))
    assert "pearson_r" in outputs(cell_with(nb, "head_entropy_vs_scale("))

    # The fit the notebook printed is the one the library computes from the same cache.
    from entropy_lens.figures import FiguresConfig, figure_data

    fit = figure_data(FiguresConfig.build(MINIMAL), cache=cache, progress=False).final.fit
    printed = outputs(cell_with(nb, "fit_scale_curve(sweep"))
    assert f"a = {fit.a:.4f} ± {fit.a_stderr:.4f}, R² = {fit.r2:.4f}" in printed


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_sites_executed_copies_are_the_notebooks(name):
    """docs/tutorials/executed/ (what the site renders, with outputs) holds each notebook's cells as they are
    committed: regenerate it after editing a notebook (`python tools/tutorial_outputs.py`)."""
    import nbformat

    stored = nbformat.read(EXECUTED / name, as_version=4)
    committed = nbformat.read(NOTEBOOKS / name, as_version=4)
    fix = f"docs/tutorials/executed/{name} is stale; run: .venv/bin/python tools/tutorial_outputs.py"
    assert [(c.cell_type, c.source) for c in stored.cells] == [
        (c.cell_type, c.source) for c in committed.cells
    ], fix
    code = [c for c in stored.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code) and sum(map(n_images, code)) >= 3


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart")  # one worker runs notebook 01 (the fixture `quickstart`)
def test_the_sites_outputs_are_a_fresh_runs(quickstart, monkeypatch, capsys):
    """What the site shows is what the notebooks print when run now (tools/tutorial_outputs.py --check):
    notebook 01's fresh run is the fixture's (its appended cell left out), the others run here."""
    import copy

    tool = tutorial_outputs()
    execute_now = tool.execute

    def execute(path):
        if path.name != "01_quickstart.ipynb":
            return execute_now(path)
        nb = copy.deepcopy(quickstart)
        assert nb.cells.pop().source == PREFIX_CELL
        return nb

    monkeypatch.setattr(tool, "execute", execute)
    code = tool.main(["--check"])
    printed = capsys.readouterr().out
    assert code == 0, printed[-2000:]
    assert "01_quickstart.ipynb: executed" in printed and "the stored tutorials are up to date" in printed


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebooks_have_no_outputs(name):
    import nbformat

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code), (
        f"{name} carries outputs; clear them: .venv/bin/jupyter nbconvert --clear-output --inplace "
        f"notebooks/{name}"
    )
