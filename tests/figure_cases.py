"""The figures pipeline at minimal settings, shared by test_figures.py and test_notebooks.py (notebook 02)
through conftest's session fixture `figures_made` (pytest puts tests/ on sys.path, so they import it as
`figure_cases`).

    MINIMAL            the `figures` settings: the embedded pair at L = 16, two samples, a 4-scale sweep
    run_minimal(root)  `entropy-lens figures` at MINIMAL into root/out, its cache in root/cache
"""

from __future__ import annotations

import json
from pathlib import Path

from entropy_lens.cli import main

MINIMAL = {
    "train_len": 16,
    "samples": 2,
    "sweep_samples": 2,
    "sweep_scales": "0.9:1.2:0.1",
    "fit_smooth": 2,
    "refuse_grid_edges": [],  # 4 scales, 2 windows: the raw argmin is often at an edge; reported
    "smooth": 2,
    "search_steps": 2,
    "search_batch": 2,
    "batch_size": 2,
    "ppl_samples": 2,
    # two prompt lengths that hold the task (98 tokens with the embedded tokenizer, more with the tiny
    # BLOOM's), 2 trials each; `alibi` is a tiny random BLOOM folder made by the fixture
    "passkey_lengths": [13, 16],
    "passkey_depths": 2,
    "passkey_keys": 1,
    "real": None,  # Figure 17's SmolLM2 row at 16K is minutes a window on 2 cores: drawn without it
    "watch_training": False,  # Figure 18's pretraining reruns: ~30 min each; the watched search is drawn
}


def run_minimal(root: Path) -> tuple[Path, int]:
    """`entropy-lens figures` at MINIMAL into root/out with its cache in root/cache: (root, exit code)."""
    from architectures import SUPPORTED, save_folder

    MINIMAL["alibi"] = str(save_folder(root, "bloom", SUPPORTED["bloom"][0]))
    config = root / "minimal.yaml"
    config.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in MINIMAL.items()))
    code = main(
        [
            "figures",
            "--config",
            str(config),
            "--out",
            str(root / "out"),
            "--cache",
            str(root / "cache"),
            "--quiet",
        ]
    )
    return root, code


# docs/paper.md's `entropy-lens figures --cached-only` as the page test runs it (tests/cli/test_examples_run.py's
# `small`: --threads 1 added): the whole redraw from the committed runs, about a minute on 2 cores
PAPER_REDRAW = ["figures", "--cached-only", "--threads", "1"]
_redrawn: dict[str, tuple[Path, int, str]] = {}


def redraw_committed(tmp_path_factory) -> tuple[Path, int, str]:
    """PAPER_REDRAW run once per process (in-process, through `entropy_lens.cli.main`) in a fresh folder
    holding figures/runs, a link to the committed runs, as docs/paper.md's reader has it: (the folder,
    the exit code, its stderr). test_figures.py compares its figures/ with the committed drawings and
    test_examples_run.py takes it as that page's command, so the minute is spent once (both tests are in
    the xdist_group "figures")."""
    import contextlib
    import io
    import os

    if "done" not in _redrawn:
        root = Path(__file__).parents[1]
        folder = tmp_path_factory.mktemp("paper-redraw")
        (folder / "figures").mkdir()
        (folder / "figures" / "runs").symlink_to(root / "figures" / "runs")
        err, here = io.StringIO(), os.getcwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stderr(err):
                code = main(PAPER_REDRAW)
        finally:
            os.chdir(here)
        _redrawn["done"] = (folder, code, err.getvalue())
    return _redrawn["done"]
