"""What the repository ships as output names no machine and carries no warning its reader cannot act on
(issue 70): the run records and tables (figures/runs with its sweeps' folders, benchmarks/results,
figures/README.md), the results files' metas (figures/runs/**/*.npz), the embedded models' records
(entropy_lens/models/tiny: training.json and the Hugging Face JSON beside it), the executed tutorials the
site renders (docs/tutorials/executed) and the notebooks. A record names a file beside it relative to its
own folder and a bundled model by its place among the packages (results.files.beside_record,
runs/provenance.py's model_facts; docs/guides/files.md); tools/tutorial_outputs.py silences tqdm's
IProgress warning and refuses an output naming its machine's folders. Read from the files the checkout
holds, tracked or not, so a regenerated output is checked before it is committed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parent.parent
OUTPUTS = sorted(
    [
        *(ROOT / "figures" / "runs").rglob("*.json"),
        *(ROOT / "benchmarks" / "results").glob("*.json"),
        ROOT / "figures" / "README.md",
        *(ROOT / "docs" / "tutorials" / "executed").glob("*.ipynb"),
        *(ROOT / "notebooks").glob("*.ipynb"),
        *(ROOT / "entropy_lens" / "models" / "tiny").rglob("*.json"),
    ]
)
# results files, scale sweeps and monitor histories: their JSON `meta` and any other text array
RESULTS = sorted((ROOT / "figures" / "runs").rglob("*.npz"))
# an absolute path into a machine's own folders (a checkout, a home, a temporary folder, an environment)
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(work|home|Users|tmp|root|opt|mnt|srv|private|var/folders)/[\w.-]"
    r"|[A-Za-z]:\\\\?(Users|work)\b|site-packages|dist-packages"
)
WARNING = re.compile(r"\b\w*Warning: ")


def machine_paths(text: str) -> list[str]:
    return [m.group(0) for m in MACHINE_PATH.finditer(text)]


def stderr_warnings(notebook: dict) -> list[str]:
    """The warnings a notebook's cells printed (a stream to stderr, or a warning in any output's text)."""
    found = []
    for cell in notebook.get("cells", []):
        for out in cell.get("outputs", []):
            text = out.get("text", "")
            text = text if isinstance(text, str) else "".join(text)
            found += [line for line in text.splitlines() if WARNING.search(line)]
    return found


def test_the_check_sees_a_machine_path_and_a_warning():
    assert machine_paths('"head_scales": "/work/main/figures/runs/heads.safetensors"')
    assert machine_paths("C:\\Users\\me\\x.json") and machine_paths(
        "/home/ann/.venv/lib/python3.11/site-packages/x"
    )
    assert not machine_paths('"head_scales": "heads-tiny-nope-512.safetensors", "url": "https://a.org/tmp/x"')
    cell = {
        "outputs": [{"name": "stderr", "text": ["x/tqdm/auto.py:21: TqdmWarning: IProgress not found\n"]}]
    }
    assert stderr_warnings({"cells": [cell]}) and not stderr_warnings({"cells": [{"outputs": []}]})


def npz_text(path: Path) -> str:
    """The text a .npz holds: every string array (a results file's `meta` JSON above all), joined."""
    with np.load(path, allow_pickle=False) as z:
        return "\n".join(str(z[k]) for k in z.files if z[k].dtype.kind in "US")


def test_the_outputs_are_there():
    names = {p.name for p in OUTPUTS}
    assert {"01_quickstart.ipynb", "README.md", "scan_cpu.json", "training.json", "sweep.json"} <= names
    assert sum(p.name.startswith("passkey-") for p in OUTPUTS) >= 4
    assert len(RESULTS) >= 500 and all(
        '"model_source"' in npz_text(p) for p in RESULTS if p.name.startswith("scan-")
    )


@pytest.mark.parametrize("path", OUTPUTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_stored_output_names_no_machine_path(path):
    found = machine_paths(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{path.relative_to(ROOT)} names {found[0]!r}: write paths relative to the output's folder "
        "(as runs/passkey.py does) and regenerate it"
    )


def test_a_stored_results_file_names_no_machine_path():
    """One test for the few hundred results files in figures/runs: each one's meta (and any other text)."""
    found = {p: machine_paths(npz_text(p)) for p in RESULTS}
    found = {p.relative_to(ROOT): paths[0] for p, paths in found.items() if paths}
    assert not found, (
        f"{len(found)} results file(s) name a machine path, {next(iter(found.items()))!r} first: write the "
        "checkpoint and files beside the output as runs/provenance.py's model_facts and recorded_settings do "
        "(a bundled model by its place among the packages, a file relative to the output's folder), and "
        "regenerate them"
    )


@pytest.mark.parametrize(
    "path", [p for p in OUTPUTS if p.suffix == ".ipynb"], ids=lambda p: str(p.relative_to(ROOT))
)
def test_a_stored_notebook_shows_no_warning(path):
    found = stderr_warnings(json.loads(path.read_text(encoding="utf-8")))
    assert not found, (
        f"{path.relative_to(ROOT)} shows {found[0][:80]!r}: silence it where the notebook runs "
        "(tools/tutorial_outputs.py) and run that tool again"
    )
