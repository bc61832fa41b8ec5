"""`entropy-lens passkey` (runs/passkey.py): the accuracy bookkeeping on a model that retrieves (the
bundled SmolLM2) and on random models that do not, the needle measurements against the float64 entropy
and mass of the model's own eager probabilities, resuming, and the refusals."""

import json

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, eager_probabilities, save_folder

from entropy_lens.cli import main
from entropy_lens.data.passkey import passkey_prompt, random_key
from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.configs import PasskeyConfig
from entropy_lens.runs.passkey import passkey


@pytest.mark.slow
def test_a_model_that_retrieves_scores_its_exact_matches():
    """SmolLM2 (a real pretrained model) inside its context: a trial is correct exactly when the decoded
    answer is the key; the cell counts them."""
    config = PasskeyConfig(model="smollm2", lengths=(300,), depths=2, keys=3, dtype="float32")
    record = passkey(config, progress=False)
    assert [c["depth"] for c in record["results"]] == [0.0, 0.5]
    for cell in record["results"]:
        assert cell["trials"] == 3 and cell["correct"] == sum(t["correct"] for t in cell["per_trial"])
        assert cell["accuracy"] == cell["correct"] / 3
        for t in cell["per_trial"]:
            assert t["correct"] == (t["answer"].strip() == str(t["key"]))
    assert sum(c["correct"] for c in record["results"]) >= 4  # it does retrieve
    trial = record["results"][0]["per_trial"][0]
    mass = np.asarray(trial["needle_mass"])
    assert mass.shape == (30, 9) and mass.max() > 0.3  # some head looks at the key when answering


@pytest.mark.parametrize("model_type", ["llama", "bloom", "gpt_oss"])
def test_the_needle_measurements_are_the_models_own_attention(model_type, tmp_path):
    """Per layer and head, the mean entropy of the answer rows and their mass on the key's tokens equal
    those of the model's own eager probabilities over prompt + decoded tokens (float64), for RoPE,
    ALiBi (BLOOM) and sinks (gpt-oss: the sink's share counted in the entropy)."""
    from entropy_lens.models import load_model

    folder = save_folder(tmp_path, model_type, SUPPORTED[model_type][0])
    config = PasskeyConfig(model=str(folder), lengths=(200,), depths=1, keys=2, dtype="float32", seed=7)
    record = passkey(config, progress=False)
    lm = load_model(str(folder), dtype="float32")
    for t, trial in enumerate(record["results"][0]["per_trial"]):
        rng = np.random.default_rng([7, 200, 0, t])
        prompt = passkey_prompt(lm.tokenizer, length=200, depth=0.0, key=random_key(rng), rng=rng, width=1.0)
        assert (prompt.key, prompt.needle_start) == (trial["key"], trial["position"])
        answer = trial["answer_ids"]
        assert len(answer) == len(prompt.answer) and trial["correct"] == (answer == prompt.answer.tolist())
        ids = torch.tensor([[*prompt.ids, *answer[:-1]]])
        _, probs = eager_probabilities(lm.model, ids, None)
        rows = slice(len(prompt.ids) - 1, None)  # the rows that chose each answer token
        for layer, p in enumerate(probs):
            p = p[0, :, rows]  # (heads, answer rows, keys)
            sink = (1 - p.sum(-1)).clamp_min(0)
            h = (-torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(sink, sink)).mean(-1)
            mass = p[..., prompt.key_positions].sum(-1).mean(-1)
            np.testing.assert_allclose(trial["entropy"][layer], h.numpy(), atol=2e-5, rtol=0)
            np.testing.assert_allclose(trial["needle_mass"][layer], mass.numpy(), atol=2e-6, rtol=0)
            top = p.argmax(-1).numpy()  # (heads, answer rows): each row's most probable key
            written = np.asarray([*prompt.ids, *answer])
            hit = (top >= prompt.needle_start) & (top < prompt.needle_stop) & (written[top] == answer)
            want = hit.sum(-1) / (prompt.needle_stop - prompt.needle_start)
            np.testing.assert_allclose(trial["retrieval_score"][layer], want, atol=1e-6, rtol=0)
        assert np.asarray(trial["needle_mass"]).max() > 0  # the key is in view


def test_retrieval_heads_of_a_model_that_answers_equal_the_generation_recorders(tmp_path, capsys):
    """--retrieval-heads on the embedded tiny-nope, which answers: the record's per-trial scores equal
    GenerationResult.retrieval_scores of the same prompts (the recorder's top keys), some head retrieves,
    and the table names the heads of the highest mean score."""
    from entropy_lens import GenerationRecorder
    from entropy_lens.analysis import retrieval_heads
    from entropy_lens.models import load_model

    out = tmp_path / "pk.json"
    argv = ["passkey", "tiny-nope", "--lens", "128", "--depths", "2", "--keys", "1", "--quiet"]
    assert main([*argv, "--retrieval-heads", "3", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    record = json.loads(out.read_text())
    # a bundled model by its place among the packages, no machine's path
    assert record["model"]["model_source"] == "entropy_lens/models/tiny/tiny-nope"
    lm = load_model("tiny-nope", dtype="float32")
    for k, cell in enumerate(record["results"]):
        rng = np.random.default_rng([42, 128, k, 0])
        prompt = passkey_prompt(
            lm.tokenizer, length=128, depth=k / 2, key=random_key(rng), rng=rng, width=0.5
        )
        n = len(prompt.answer)
        with GenerationRecorder(lm.model, stats="top_key") as rec, torch.no_grad():
            lm.model.generate(
                torch.from_numpy(prompt.ids)[None],
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=0,
            )
        want = rec.result().retrieval_scores((prompt.needle_start, prompt.needle_stop))[0]
        np.testing.assert_allclose(cell["per_trial"][0]["retrieval_score"], want, atol=1e-6)
    scores = retrieval_heads(record, 128)
    assert scores.max() > 0
    layer, head = divmod(int(np.argmax(scores)), scores.shape[1])
    assert f"128: {layer}.{head} ({scores.max():.3f})" in shown
    assert main([*argv, "--retrieval-heads", "-1", "--out", str(tmp_path / "x.json")]) == 2
    assert "--retrieval-heads must be at least 0" in capsys.readouterr().err


@pytest.mark.slow
def test_a_rerun_continues_and_other_settings_are_refused(tmp_path, capsys):
    """The record is written per cell: rerunning the command keeps the cells it holds (one is marked
    here) and adds the missing ones, equal to an uninterrupted run; other settings need --force."""
    from tiny import make_tiny_dir

    folder = make_tiny_dir(tmp_path / "tiny")
    out = tmp_path / "pk.json"
    args = ["passkey", str(folder), "--lens", "200", "240", "--depths", "2", "--keys", "1", "--out", str(out)]
    assert main([*args, "--quiet"]) == 0
    whole = json.loads(out.read_text())
    cut = {**whole, "results": whole["results"][:2]}  # as a run stopped after two cells leaves it
    cut["results"][0]["per_trial"][0]["answer"] = "kept"
    out.write_text(json.dumps(cut))
    assert main([*args, "--quiet"]) == 0
    again = json.loads(out.read_text())
    assert again["results"][0]["per_trial"][0]["answer"] == "kept"  # not recomputed
    assert again["results"][1] == whole["results"][1]  # kept, with its time
    timeless = [
        [{k: v for k, v in c.items() if k != "wall_s"} for c in r["results"][2:]] for r in (again, whole)
    ]
    assert timeless[0] == timeless[1]  # recomputed: the same but for the time each cell took
    assert all(c["wall_s"] > 0 for c in again["results"]) and again["model"]["threads"] >= 1
    capsys.readouterr()
    assert main([*args[:-2], "--keys", "2", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings" in err[0] and "--force" in err[0]
    assert main([*args[:-2], "--keys", "2", "--out", str(out), "--quiet", "--force"]) == 0
    assert json.loads(out.read_text())["results"][0]["trials"] == 2
    out.write_text("{not json")
    capsys.readouterr()
    assert main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "is not an entropy-lens passkey record" in err[0] and out.read_text() == "{not json"
    )


def test_a_window_too_short_for_the_task_is_one_line(tmp_path, capsys):
    from tiny import make_tiny_dir

    folder = make_tiny_dir(tmp_path / "tiny")
    out = tmp_path / "pk.json"
    capsys.readouterr()
    assert main(["passkey", str(folder), "--lens", "40", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lens 40 is too short" in err[0] and not list(tmp_path.glob("pk.json*"))
    with pytest.raises(EntropyLensError, match="ascending"):
        PasskeyConfig(model="x", lengths=(200, 100)).check()


def test_the_record_names_its_head_scales_file_relative_to_its_folder(tmp_path, monkeypatch):
    """A record names its --head-scales file from its own folder (model "scales" and config alike): moved or
    committed with that file it names no machine's path, and a rerun from elsewhere continues it (issue 70)."""
    from tiny import make_tiny_dir

    folder = make_tiny_dir(tmp_path / "tiny")  # 2 layers x 4 heads
    (tmp_path / "scales").mkdir()
    np.save(tmp_path / "scales" / "hs.npy", np.full((2, 4), 1.1))
    out = tmp_path / "runs" / "pk.json"
    out.parent.mkdir()
    args = ["passkey", str(folder), "--lens", "200", "--depths", "1", "--keys", "1", "--out", str(out)]
    monkeypatch.chdir(tmp_path / "scales")
    assert main([*args, "--head-scales", "hs.npy", "--quiet"]) == 0
    record = json.loads(out.read_text())
    assert record["config"]["head_scales"] == record["model"]["scales"] == "../scales/hs.npy"
    assert record["model"]["model_source"] == "../tiny"  # the checkpoint loaded, from the record's folder
    assert str(tmp_path / "scales") not in out.read_text()  # (the model is named as given: a path here)
    monkeypatch.chdir(tmp_path)  # the same file named from another folder: the same settings
    assert main([*args, "--head-scales", str(tmp_path / "scales" / "hs.npy"), "--quiet"]) == 0
    assert json.loads(out.read_text())["results"] == record["results"]  # kept, not run again
