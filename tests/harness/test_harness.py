"""The lm-evaluation-harness model (entropy_lens/harness): the unmodified RoPE checkpoint scores exactly as
lm-eval's stock `hf` model; each variant applies through the attention function (a uniform scale and
λ(h) equal the model with its query rows scaled); `entropy-lens eval` and lm-eval's own command line.
Offline: the tasks are tests/harness_tasks/ (a held-out novel as local JSON)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lm_eval")

from lm_eval.models.huggingface import HFLM
from lm_eval_runs import HARNESS_TASKS, TASKS, harness_command, loglikelihoods, responses, run_tasks

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.harness.config import HarnessModelConfig
from entropy_lens.harness.model import EntropyLensLM
from entropy_lens.models import BUNDLED_MODELS, load_model

ROOT = Path(__file__).parents[2]


def _stock(path, **kw) -> HFLM:
    return HFLM(pretrained=str(path), dtype="float32", device="cpu", **kw)


@pytest.fixture(scope="module")
def rope_unmodified():
    """(lm-eval's stock hf model, the entropy-lens model) of tiny-rope, and both runs on the three tasks."""
    stock = _stock(BUNDLED_MODELS["tiny-rope"].path(), batch_size=4)
    ours = EntropyLensLM(pretrained="tiny-rope", device="cpu", batch_size=4)
    return run_tasks(stock, limit=4), run_tasks(ours, limit=4), ours


def test_unmodified_rope_equals_stock_hf(rope_unmodified):
    """Every loglikelihood, rolling loglikelihood and generated continuation, bit for bit; so every metric."""
    stock, ours, lm = rope_unmodified
    for task in TASKS:
        assert responses(ours, task) == responses(stock, task), task
        assert ours["results"][task] == stock["results"][task], task
    assert lm.attention_paths == {"sdpa"}  # through the toolkit's attention function, which ran sdpa
    generated = [r[0][0] for r in responses(ours, "el_generate")]
    assert all(isinstance(g, str) for g in generated) and any(g.strip() for g in generated)


def _with_query_rows_scaled(name: str, scales: np.ndarray) -> HFLM:
    """lm-eval's stock model over `name` with head h's q_proj rows of layer l times scales[l, h]: the
    independent reference of λ_h = scales[l, h]/√d (RoPE rotates q linearly, so scaling before it is
    scaling after)."""
    lm = load_model(name, dtype="float32", device="cpu")
    d = lm.head_dim
    for layer, attention in enumerate(m.self_attn for m in lm.model.model.layers):
        for head in range(lm.n_heads):
            attention.q_proj.weight.data[head * d : (head + 1) * d] *= float(scales[layer, head])
    return HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=4)


def test_uniform_scale_changes_the_loglikelihoods_as_scaled_queries_do(rope_unmodified):
    tasks = ("el_next_sentence", "el_rolling")
    ours = run_tasks(
        EntropyLensLM(pretrained="tiny-rope", device="cpu", scale=1.3, batch_size=4), tasks, limit=4
    )
    reference = run_tasks(_with_query_rows_scaled("tiny-rope", np.full((4, 6), 1.3)), tasks, limit=4)
    for task in ("el_next_sentence", "el_rolling"):
        got, unscaled = loglikelihoods(ours, task), loglikelihoods(rope_unmodified[1], task)
        assert not np.allclose(got, unscaled, rtol=1e-3), task
        np.testing.assert_allclose(got, loglikelihoods(reference, task), rtol=1e-4, err_msg=task)


def test_head_scales_file_applies_per_head(tmp_path):
    scales = 1.0 + 0.1 * np.arange(24, dtype=np.float64).reshape(4, 6) % 0.7  # each head its own λ(h)
    np.save(tmp_path / "hs.npy", scales)
    lm = EntropyLensLM(
        pretrained="tiny-rope", device="cpu", head_scales=str(tmp_path / "hs.npy"), batch_size=4
    )
    assert lm.variant.scale_source.endswith("hs.npy")
    ours = run_tasks(lm, ("el_rolling",), limit=4)
    reference = run_tasks(_with_query_rows_scaled("tiny-rope", scales), ("el_rolling",), limit=4)
    np.testing.assert_allclose(
        loglikelihoods(ours, "el_rolling"), loglikelihoods(reference, "el_rolling"), rtol=1e-4
    )
    uniform = run_tasks(
        _with_query_rows_scaled("tiny-rope", np.full((4, 6), scales.mean())), ("el_rolling",), limit=4
    )
    assert not np.allclose(
        loglikelihoods(ours, "el_rolling"), loglikelihoods(uniform, "el_rolling"), rtol=1e-3
    )


@pytest.mark.parametrize(
    "variant",
    [
        {"nope": True},
        {"scale_schedule": "log:0.5", "train_len": 16},
        {"rope_scaling": "linear:2"},
        {"scale": 0.8, "scale_schedule": "piecewise:1.5", "train_len": 32},
    ],
    ids=lambda v: ",".join(f"{k}={v[k]}" for k in v),
)
def test_every_variant_changes_what_the_model_scores(variant, rope_unmodified):
    lm = EntropyLensLM(pretrained="tiny-rope", device="cpu", batch_size=4, **variant)
    ours = run_tasks(lm, ("el_rolling", "el_generate"), limit=3)
    unmodified = rope_unmodified[1]
    assert not np.allclose(
        loglikelihoods(ours, "el_rolling"), loglikelihoods(unmodified, "el_rolling")[:3], rtol=1e-3
    )
    assert all(isinstance(r[0][0], str) for r in responses(ours, "el_generate"))
    facts = lm.get_model_info()["entropy_lens_model"]
    assert facts["nope"] is bool(variant.get("nope")) and facts["model"] == "tiny-rope"


@pytest.mark.parametrize("name", ["tiny-nope", pytest.param("tiny-alibi", marks=pytest.mark.slow)])
def test_other_embedded_models_with_and_without_a_scale(name):
    """NoPE (its config declares it) and ALiBi (BLOOM blocks, the toolkit's streamed attention): the three
    kinds of request run, a scale changes the loglikelihoods; ALiBi unscaled matches stock hf to float
    rounding (its attention is the toolkit's own kernel, not sdpa)."""
    plain = run_tasks(EntropyLensLM(pretrained=name, device="cpu", batch_size=4), limit=3)
    scaled = run_tasks(EntropyLensLM(pretrained=name, device="cpu", batch_size=4, scale=1.4), limit=3)
    assert not np.allclose(
        loglikelihoods(plain, "el_rolling"), loglikelihoods(scaled, "el_rolling"), rtol=1e-3
    )
    assert 0 <= plain["results"]["el_next_sentence"]["acc,none"] <= 1
    if name == "tiny-alibi":
        stock = run_tasks(_stock(BUNDLED_MODELS[name].path(), batch_size=4), limit=3)
        for task in ("el_next_sentence", "el_rolling"):
            np.testing.assert_allclose(loglikelihoods(plain, task), loglikelihoods(stock, task), rtol=1e-5)


def test_model_arguments_are_the_scan_settings():
    import lm_eval.api.registry

    assert lm_eval.api.registry.get_model("entropy-lens") is EntropyLensLM
    config = HarnessModelConfig.from_model_args({"pretrained": "tiny-nope", "scale": 1, "revision": 12})
    assert config.scale == 1.0 and isinstance(config.scale, float) and config.revision == "12"
    assert config.model_args() == {"pretrained": "tiny-nope", "scale": 1.0, "revision": "12"}
    with pytest.raises(EntropyLensError, match="takes no argument scael; its arguments: pretrained, .*scale"):
        EntropyLensLM(pretrained="tiny-nope", scael=1.2)
    with pytest.raises(EntropyLensError, match="--model_args scale must be above 0"):
        EntropyLensLM(pretrained="tiny-nope", scale=-1.0)
    with pytest.raises(EntropyLensError, match="--scale and --head-scales both given"):
        EntropyLensLM(pretrained="tiny-nope", scale=1.2, head_scales="x.npy")
    lm = EntropyLensLM.create_from_arg_string(
        "pretrained=tiny-nope,scale=1.2", {"device": "cpu", "batch_size": 2}
    )
    assert lm.variant.scales == 1.2 and lm.batch_size == 2 and str(lm.device) == "cpu"


def _eval(tmp_path, *flags, name="r.json"):
    out = tmp_path / name
    argv = ["eval", *flags, "--include-path", str(HARNESS_TASKS), "--out", str(out), "--device", "cpu"]
    return main([*argv, "--bootstrap-iters", "0", "--quiet"]), out


@pytest.mark.slow
@pytest.mark.xdist_group("lm-eval-index")  # conftest.py: lm-eval's own tasks indexed once
def test_eval_command_writes_lm_eval_results_and_provenance(tmp_path, capsys):
    code, out = _eval(
        tmp_path,
        "tiny-nope",
        "--scale",
        "1.2",
        "--tasks",
        "el_next_sentence,el_rolling",
        "--limit",
        "2",
        "--log-samples",
    )
    assert code == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    assert set(record["results"]) == {"el_next_sentence", "el_rolling"}
    assert record["config"]["model"] == "entropy-lens"
    assert record["config"]["model_args"] == {"pretrained": "tiny-nope", "scale": 1.2, "device": "cpu"}
    ours = record["entropy_lens"]
    assert (
        ours["eval_config"]["scale"] == 1.2 and ours["eval_config"]["tasks"] == "el_next_sentence,el_rolling"
    )
    assert ours["model"]["scale_source"] == "uniform" and ours["model"]["nope"] is True
    assert {"git_hash", "entropy_lens_version", "lm_eval_version", "torch_version"} <= set(ours)
    assert ours["attention_path"] == "sdpa"
    samples = json.loads((tmp_path / "r.samples.json").read_text())
    assert len(samples["el_next_sentence"]) == 2
    captured = capsys.readouterr()
    assert "el_next_sentence: acc" in captured.out
    assert (
        "it/s" not in captured.err and "Custom kwargs" not in captured.err
    )  # --quiet: no bars, no lm-eval log


def test_eval_command_refusals_before_anything_loads(tmp_path, capsys, monkeypatch):
    (tmp_path / "r.json").write_text("{}")
    code, _ = _eval(tmp_path, "tiny-nope", "--tasks", "el_next_sentence")
    assert code == 2 and "r.json already exists; pass --force" in capsys.readouterr().err
    code, _ = _eval(tmp_path, "tiny-nope", "--tasks", "el_rolling", "--metadata", "[1]", name="s.json")
    assert code == 2 and "--metadata must be a JSON object" in capsys.readouterr().err
    code, _ = _eval(tmp_path, "tiny-nope", "--tasks", " , ", name="s.json")
    assert code == 2 and "--tasks names no task" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as where lm-eval is not installed
    code, _ = _eval(tmp_path, "tiny-nope", "--tasks", "el_rolling", name="s.json")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pip install 'entropy-lens[eval]'" in err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("lm-eval-index")
def test_eval_command_refuses_unknown_tasks_and_cut_passkey_windows(tmp_path, capsys):
    """Both need lm-eval's task index (seconds): an unknown name with the closest ones, a passkey window
    longer than the model's inputs with the flag that fixes it."""
    code, _ = _eval(tmp_path, "tiny-nope", "--tasks", "el_next_sentense")
    assert code == 2 and "knows no task el_next_sentense (close: el_next_sentence" in capsys.readouterr().err
    code, _ = _eval(tmp_path, "tiny-nope", "--tasks", "entropy_lens_passkey_1024")
    assert code == 2 and "pass --max-length 1024" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_lm_eval_command_line_runs_the_registered_model(tmp_path):
    """lm-eval's own CLI (python -m entropy_lens.harness: lm_eval with the model registered), a variant
    in --model_args, a task of --include_path; as the docs show it, with no --device, on a machine
    where torch sees no GPU (lm-eval's own default, cuda:0, failed there): the device follows the machine."""
    run = harness_command(
        "pretrained=tiny-nope,scale=1.2", tmp_path, "--limit", "2", env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (written,) = tmp_path.rglob("results_*.json")
    record = json.loads(written.read_text())
    assert record["config"]["model"] == "entropy-lens" and record["config"]["model_args"]["scale"] == 1.2
    assert "acc,none" in record["results"]["el_next_sentence"]
    assert record["config"]["entropy_lens_model"]["scale_source"] == "uniform"
    assert record["config"]["device"] == "auto" and record["config"]["entropy_lens_model"]["device"] == "cpu"


def test_the_harness_command_gives_lm_eval_the_machines_device():
    """python -m entropy_lens.harness adds --device auto to a run that names none (lm-eval's default is
    cuda:0); a device or a --config file of the user's is left to lm-eval; so are ls, validate, --help."""
    from entropy_lens.harness.__main__ import with_device

    run = ["--model", "entropy-lens", "--tasks", "piqa"]
    assert with_device(run) == [*run, "--device", "auto"]
    assert with_device(["--model=entropy-lens"])[-2:] == ["--device", "auto"]
    for own in (["--device", "cpu"], ["--device=cuda:1"], ["--config", "run.yaml"], ["-C", "run.yaml"]):
        assert with_device([*run, *own]) == [*run, *own]
    for other in (["ls", "tasks"], ["--help"], []):
        assert with_device(other) == other


def test_the_guides_harness_example_leaves_the_device_to_the_machine():
    """The lm-eval guide's `python -m entropy_lens.harness` example names no --device (as shown, it runs
    on a machine without a GPU too)."""
    page = (ROOT / "docs" / "guides" / "lm-eval.md").read_text(encoding="utf-8")
    examples = [b for b in page.split("```") if "python -m entropy_lens.harness --model entropy-lens" in b]
    assert examples and not any("--device" in b for b in examples)


def test_pyproject_declares_the_lm_eval_plugin_entry_point(tmp_path):
    """pyproject's entry point in lm-eval's group `lm_eval.models` (its PR #4013), read back by
    importlib.metadata from a dist-info written as an install writes it, loads the registered class."""
    import importlib.metadata as md

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    from lm_eval.api.registry import get_model

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"]["lm_eval.models"]
    assert declared == {"entropy-lens": "entropy_lens.harness.model:EntropyLensLM"}
    dist_info = tmp_path / "entropy_lens-0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: entropy-lens\nVersion: 0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in declared.items())
    (dist_info / "entry_points.txt").write_text(f"[lm_eval.models]\n{lines}")
    (entry,) = md.PathDistribution(dist_info).entry_points.select(group="lm_eval.models")
    assert entry.name == "entropy-lens" and entry.load() is EntropyLensLM
    assert get_model(entry.name) is EntropyLensLM


@pytest.mark.slow
def test_unmodified_smollm2_equals_stock_hf():
    """A real pretrained RoPE model (SmolLM2-135M, GQA): loglikelihoods, rolling loglikelihoods and
    generations bit for bit against lm-eval's stock hf model on the same float32 folder."""
    from entropy_lens.models.gguf import ensure_gguf_cache

    folder = ensure_gguf_cache(BUNDLED_MODELS["smollm2"].path())
    stock = run_tasks(_stock(folder, batch_size=2), limit=2)
    ours = run_tasks(EntropyLensLM(pretrained="smollm2", device="cpu", batch_size=2), limit=2)
    for task in TASKS:
        assert responses(ours, task) == responses(stock, task), task
