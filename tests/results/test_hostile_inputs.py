"""A hostile pass after issue 48: JSON nested deeper than Python's recursion limit, in any file a reader
takes (sweep.json, a results file's meta, an lm-eval results file, a head-scales file), is refused in
one line, never a RecursionError traceback."""

import numpy as np
import pytest
from cli_cases import one_line_error
from sweeps import make_result, sweep_folder

from entropy_lens.analysis.downstream import load_harness_run
from entropy_lens.errors import EntropyLensError
from entropy_lens.models.scales import load_head_scales_file
from entropy_lens.results import ScanResult

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads raises RecursionError on it


def test_a_deeply_nested_sweep_index_is_one_line_in_fit_and_view(tmp_path, capsys):
    folder = sweep_folder(tmp_path / "sw")
    (folder / "sweep.json").write_text(DEEP)
    for argv in (["fit", str(folder)], ["view", str(folder), "--out", str(tmp_path / "p.html")]):
        err = one_line_error(argv, capsys)
        assert "sweep.json is not readable JSON (maximum recursion depth" in err and "--resume" in err


def test_a_deeply_nested_results_meta_is_refused_in_one_line(tmp_path):
    path = tmp_path / "r.npz"
    make_result(np.linspace(3.0, 2.0, 64)).save(path)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["meta"] = np.array(DEEP)
    np.savez(path, **arrays)
    with pytest.raises(EntropyLensError, match=r"is not a readable results file \(meta: maximum recursion"):
        ScanResult.load(path)


def test_a_deeply_nested_harness_or_scales_file_is_refused_in_one_line(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(DEEP)
    with pytest.raises(EntropyLensError, match=r"as an lm-eval results JSON \(maximum recursion"):
        load_harness_run(path)
    with pytest.raises(EntropyLensError, match=r"is not valid JSON \(maximum recursion"):
        load_head_scales_file(path, 2, 4)


def test_ranks_or_a_checkpoint_that_differ_in_seed_or_len_name_the_flag_not_the_chunks():
    """Two hand-started ranks on --seed 0 and 1 (or --len 256 and 512) drew other chunks too: the refusal
    names the flag that differs, not the chunks it drew."""
    from entropy_lens.runs.configs import ScanConfig
    from entropy_lens.runs.output import scan_difference

    def identity(**flags):
        config = ScanConfig(model="tiny-rope", length=256, **flags).to_dict()
        return {"config_hash": "abc", "chunks": [flags.get("seed", 0), 7], "scan_config": config}

    said = scan_difference(identity(seed=0), identity(seed=1), names=("on rank 0", "on rank 1"))
    assert said is not None and said.startswith("--seed (0 on rank 0, 1 on rank 1)")
