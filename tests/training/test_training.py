"""entropy_lens.training: the tokenizer, the tiny-model recipe, determinism, resume and the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
import torch
from training_runs import crash_at, weights

import entropy_lens.data as data_module
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.models import load_model
from entropy_lens.training import TinyRecipe, train_bpe, train_tiny
from entropy_lens.training.recipe import lr_at


def micro(text_file, **overrides) -> TinyRecipe:
    fields = {
        "hidden": 32,
        "intermediate": 64,
        "layers": 2,
        "heads": 4,
        "kv_heads": 2,
        "vocab": 300,
        "train_len": 16,
        "batch": 4,
        "steps": 6,
        "warmup": 2,
        "data": str(text_file),
    }
    return TinyRecipe(**{**fields, **overrides})


def test_bpe_is_deterministic_and_round_trips(text_file):
    docs = [text_file.read_text()]
    a, b = train_bpe(docs, 300), train_bpe(docs, 300)
    assert a.get_vocab() == b.get_vocab() and len(a) == 300
    sample = "Anne Elliot, «naïve» — 1814!\n"
    ids = a(sample)["input_ids"]
    assert a.decode(ids) == sample and ids == b(sample)["input_ids"]
    assert a.eos_token_id == a.bos_token_id == a.convert_tokens_to_ids("<|endoftext|>")


def test_lr_schedule():
    r = TinyRecipe(steps=100, warmup=10, lr=1e-3, min_lr_ratio=0.1)
    lrs = [lr_at(r, s) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(x >= y for x, y in itertools.pairwise(lrs[9:]))  # non-increasing after warm-up
    assert lrs[-1] == pytest.approx(1e-4, rel=1e-2)


@pytest.mark.parametrize("kind", ["nope", "rope"])
def test_train_writes_a_loadable_folder(tmp_path, text_file, kind):
    recipe = micro(text_file, kind=kind)
    out = train_tiny(recipe, tmp_path / f"m-{kind}", progress=False)
    assert not (tmp_path / f"m-{kind}.partial").exists()
    facts = json.loads((out / "training.json").read_text())
    assert facts["recipe"] == dataclasses.asdict(recipe) and facts["tokens_seen"] == 6 * 4 * 16

    lm = load_model(str(out))
    assert (lm.train_len, lm.nope, lm.n_layers, lm.n_heads, lm.n_kv_heads) == (16, kind == "nope", 2, 4, 2)
    ids = torch.tensor([lm.tokenizer("It was a truth universally acknowledged")["input_ids"]])
    with torch.no_grad():
        ours = lm.model(ids).logits
        shifted = lm.model(ids, position_ids=torch.arange(ids.shape[1])[None] * 5 + 3).logits
    # NoPE ignores positions; RoPE does not.
    assert torch.equal(ours, shifted) == (kind == "nope")

    # An ordinary transformers load (no entropy_lens) computes the same model, NoPE included.
    from transformers import AutoModelForCausalLM

    stock = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(stock(ids).logits, ours, rtol=0, atol=1e-5)


def test_training_lowers_the_loss(tmp_path, text_file):
    out = train_tiny(micro(text_file, steps=30, lr=3e-3), tmp_path / "m", progress=False)
    log = json.loads((out / "training.json").read_text())["log"]
    assert [r["step"] for r in log] == [10, 20, 30]
    assert log[-1]["loss"] < log[0]["loss"] < np.log(300)


@pytest.mark.slow  # trains twice (a run and its resumption)
def test_same_seed_same_weights_and_resume_is_exact(tmp_path, text_file, monkeypatch):
    recipe = micro(text_file)
    a = weights(train_tiny(recipe, tmp_path / "a", progress=False))
    b = weights(train_tiny(recipe, tmp_path / "b", progress=False))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    other = weights(train_tiny(micro(text_file, seed=1), tmp_path / "c", progress=False))
    assert not np.array_equal(
        a["model.layers.0.self_attn.q_proj.weight"], other["model.layers.0.self_attn.q_proj.weight"]
    )

    real_windows = data_module.random_windows
    monkeypatch.setattr(data_module, "random_windows", crash_at(5))
    with pytest.raises(KeyboardInterrupt):
        train_tiny(recipe, tmp_path / "r", progress=False, checkpoint_every=2)
    assert (tmp_path / "r.partial" / "checkpoint.pt").is_file() and not (tmp_path / "r").exists()
    monkeypatch.setattr(data_module, "random_windows", real_windows)
    with pytest.raises(EntropyLensError, match="another recipe"):
        train_tiny(micro(text_file, lr=1e-2), tmp_path / "r", resume=True, progress=False)
    resumed = weights(train_tiny(recipe, tmp_path / "r", resume=True, progress=False))
    assert all(np.array_equal(a[k], resumed[k]) for k in a)


class _RunsCode:
    """A pickled object that runs code when it is unpickled: what a crafted checkpoint carries."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_a_crafted_checkpoint_is_refused_before_it_runs_code(tmp_path, text_file):
    recipe = micro(text_file)
    work = tmp_path / "r.partial"
    work.mkdir()
    marker = tmp_path / "code-ran"
    torch.save(
        {"recipe": dataclasses.asdict(recipe), "step": 1, "payload": _RunsCode(marker)},
        work / "checkpoint.pt",
    )
    with pytest.raises(EntropyLensError, match="Python objects other than tensors and plain data") as err:
        train_tiny(recipe, tmp_path / "r", resume=True, progress=False)
    assert not marker.exists() and "\n" not in str(err.value) and "--force" in str(err.value)


@pytest.mark.parametrize(
    "state, why",
    [
        ([1, 2], "a list"),
        ({"recipe": {}, "step": 1}, "'log' is missing"),
        ({"recipe": {}, "step": "1", "log": [], "wall_s": 0.0, "model": {}, "optimizer": {}}, "'step'"),
        ({"recipe": {}, "step": -4, "log": [], "wall_s": 0.0, "model": {}, "optimizer": {}}, "step -4"),
    ],
)
def test_a_checkpoint_of_the_wrong_shape_is_one_line(tmp_path, state, why):
    from entropy_lens.training.checkpoint import read_checkpoint

    torch.save(state, tmp_path / "checkpoint.pt")
    with pytest.raises(EntropyLensError, match=why):
        read_checkpoint(tmp_path / "checkpoint.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "checkpoint.pt").read_bytes()[:20])
    with pytest.raises(EntropyLensError, match="cannot be read as a checkpoint"):
        read_checkpoint(tmp_path / "cut.pt")


def test_the_package_never_unpickles_without_weights_only():
    """Every torch.load in the package passes weights_only=True, and nothing else unpickles (no
    pickle.load, no np.load with allow_pickle=True): a file a user receives can run no code."""
    import ast
    from pathlib import Path

    import entropy_lens

    torch_loads = 0
    for path in Path(entropy_lens.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner, name = getattr(node.func.value, "id", None), node.func.attr
            keywords = {k.arg: getattr(k.value, "value", None) for k in node.keywords}
            where = f"{path}:{node.lineno}"
            if (owner, name) == ("torch", "load"):
                torch_loads += 1
                assert keywords.get("weights_only") is True, f"{where}: torch.load without weights_only=True"
            assert owner != "pickle" or name not in ("load", "loads", "Unpickler"), f"{where}: pickle.{name}"
            assert keywords.get("allow_pickle") is not True, f"{where}: allow_pickle=True"
    assert (
        torch_loads >= 1
    )  # the training checkpoint (a .bin model goes through from_pretrained(weights_only=True))


def test_snapshot_is_the_run_at_that_step(tmp_path, text_file, monkeypatch):
    """A snapshot is the model the run holds after that step (its checkpoint there), a loadable folder
    inside the finished one, and a resume keeps snapshots of the first part."""
    recipe = micro(text_file)
    out = train_tiny(recipe, tmp_path / "a", progress=False, snapshots=(3,))
    snap = out / "step-3"
    facts = json.loads((snap / "training.json").read_text())
    assert facts["snapshot_step"] == 3 and facts["tokens_seen"] == 3 * recipe.tokens_per_step
    assert "snapshot_step" not in json.loads((out / "training.json").read_text())
    assert load_model(str(snap)).train_len == recipe.train_len

    real_windows = data_module.random_windows
    monkeypatch.setattr(data_module, "random_windows", crash_at(3))
    with pytest.raises(KeyboardInterrupt):
        train_tiny(recipe, tmp_path / "b", progress=False, checkpoint_every=3, snapshots=(3,))
    state = torch.load(tmp_path / "b.partial" / "checkpoint.pt", weights_only=True)
    assert state["step"] == 3
    ours = weights(snap)
    assert all(np.array_equal(ours[k], state["model"][k].numpy()) for k in ours)
    monkeypatch.setattr(data_module, "random_windows", real_windows)
    with pytest.raises(EntropyLensError, match="did not save that snapshot"):
        train_tiny(recipe, tmp_path / "b", resume=True, progress=False, snapshots=(2,))
    resumed = train_tiny(recipe, tmp_path / "b", resume=True, progress=False, snapshots=(3,))
    assert all(np.array_equal(ours[k], weights(resumed / "step-3")[k]) for k in ours)
    assert all(np.array_equal(weights(out)[k], weights(resumed)[k]) for k in ours)
    with pytest.raises(EntropyLensError, match="not a step before the last"):
        train_tiny(recipe, tmp_path / "c", progress=False, snapshots=(recipe.steps,))


def test_cli_trains_and_refuses_to_overwrite(tmp_path, text_file, capsys):
    args = [
        "train-tiny",
        "--kind",
        "rope",
        "--hidden",
        "32",
        "--intermediate",
        "64",
        "--layers",
        "1",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--vocab",
        "280",
        "--train-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--data",
        str(text_file),
        "--out",
        str(tmp_path / "m"),
        "--quiet",
    ]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().out and load_model(str(tmp_path / "m")).train_len == 8
    assert main(args) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"kind": "t5"}, "nope, rope or alibi"),
        ({"hidden": 30, "heads": 4}, "multiple"),
        ({"heads": 4, "kv_heads": 3}, "multiple"),
        ({"vocab": 100}, "too small"),
        ({"steps": 0}, "at least 1"),
        ({"data": "no-such-corpus.txt"}, "no-such-corpus"),
    ],
)
def test_bad_recipes(tmp_path, text_file, overrides, match):
    with pytest.raises(EntropyLensError, match=match):
        train_tiny(micro(text_file, **overrides), tmp_path / "m", progress=False)
    assert not (tmp_path / "m").exists()


def test_the_alibi_twin_trains_deterministically_and_is_captured(text_file, tmp_path):
    """--kind alibi: a BLOOM of the recipe's width, depth and heads (ALiBi), trained on the same batches;
    two runs give the same weights, and the capture measures it like the Llama pair."""
    from entropy_lens.capture import EntropyRecorder

    recipe = micro(text_file, kind="alibi", kv_heads=4)
    a = train_tiny(recipe, tmp_path / "a", progress=False)
    b = train_tiny(recipe, tmp_path / "b", progress=False)
    assert all(np.array_equal(x, weights(b)[k]) for k, x in weights(a).items())
    lm = load_model(str(a), dtype="float32")
    assert type(lm.model).__name__ == "BloomForCausalLM" and lm.train_len == 16
    assert lm.model.config.n_head == 4 and lm.model.config.hidden_size == 32
    with EntropyRecorder(lm.model) as rec, torch.no_grad():
        lm.model(torch.randint(3, 200, (1, 24)))
    assert rec.entropy.shape == (2, 4, 24) and np.isfinite(rec.entropy).all()


def test_a_share_of_each_batch_is_passkey_documents(text_file):
    """--passkey-share: the last round(share · batch) windows of a step end in a whole passkey document
    (prompt then answer) of a random length in [L/2, L + 1], after text and a separator, so the answer's
    position varies; drawn by (seed, step); the rest are the usual windows."""
    from entropy_lens.data import packed_stream
    from entropy_lens.data.passkey import INSTRUCTION, QUESTION, passkey_prompt, shortest_prompt
    from entropy_lens.training.batches import training_batch

    recipe = micro(text_file, train_len=200, batch=4, passkey_share=0.5)
    tokenizer = train_bpe([text_file.read_text()], 300)
    stream, _ = packed_stream(tokenizer, str(text_file))
    batch = training_batch(recipe, stream, tokenizer, 3)
    plain = training_batch(dataclasses.replace(recipe, passkey_share=0.0), stream, tokenizer, 3)
    assert batch.shape == (4, 201) and np.array_equal(batch[:2], plain[:2])
    assert np.array_equal(batch, training_batch(recipe, stream, tokenizer, 3))  # the step alone decides
    sep, lengths = tokenizer.eos_token_id, set()
    for step in range(3, 9):
        for row in training_batch(recipe, stream, tokenizer, step)[2:]:
            seps = np.flatnonzero(
                row == sep
            )  # a document shorter than the window follows text and a separator
            start = int(seps[-1]) + 1 if len(seps) else 0
            doc = tokenizer.decode(row[start:])
            key = doc.rsplit(QUESTION, 1)[1].strip()
            assert doc.startswith(INSTRUCTION) and len(key) == 5 and key.isdigit()
            assert f"The pass key is {key}. Remember it." in doc
            assert max(100, shortest_prompt(tokenizer, int(key))) <= len(row) - start <= 201
            lengths.add(len(row) - start)
    assert len(lengths) > 3
    shortest = shortest_prompt(tokenizer, 12345)  # the prompt without filler
    prompt = passkey_prompt(tokenizer, length=shortest, depth=0.5, key=12345, rng=np.random.default_rng(0))
    assert len(prompt.ids) + len(prompt.answer) == shortest
    with pytest.raises(EntropyLensError, match=f"needs at least {shortest} tokens"):
        passkey_prompt(tokenizer, length=shortest - 1, depth=0.5, key=12345, rng=np.random.default_rng(0))
    assert not np.array_equal(batch[2], training_batch(recipe, stream, tokenizer, 4)[2])
    with pytest.raises(EntropyLensError, match="--passkey-share must be at least 0 and at most 1"):
        micro(text_file, passkey_share=1.5).check()


def test_model_cards_describe_the_alibi_twin_and_the_passkey_runs():
    """A card names BLOOM's blocks and every difference from the Llama pair for the alibi kind, shows each
    other model's loss table, and tabulates a passkey record with its Wilson intervals."""
    from entropy_lens.analysis import wilson_interval
    from entropy_lens.training.report import LengthReport, model_card

    spans = {"[L/2, L)": (2, 4), "[L, 2L)": (4, 8)}

    def report(model, base):
        return LengthReport(model, 4, 8, 2, "austen:persuasion", spans, loss={1.0: {n: base for n in spans}})

    recipe = {**dataclasses.asdict(TinyRecipe(kind="alibi")), "passkey_share": 0.25}
    training = {"recipe": recipe, "parameters": 1234, "data": "text", "tokens_seen": 10, "wall_s": 60.0}
    training |= {"threads": 1, "torch": "2.13.0", "final_train_loss_mean_last_50": 2.5}
    trial = {"correct": True, "needle_mass": [[0.1, 0.7]], "entropy": [[1.0, 2.0]]}
    record = {
        "config": {"depths": 1, "keys": 2, "seed": 42},
        "model": {"train_len": 4},
        "results": [
            {"length": 4, "per_trial": [trial, trial]},
            {"length": 8, "per_trial": [trial, {**trial, "correct": False}]},
        ],
    }
    card = model_card(
        report("x/tiny-alibi", 3.0),
        training,
        [report("x/tiny-nope", 3.1), report("x/tiny-rope", 3.2)],
        record,
    )
    assert card.startswith("# tiny-alibi\n") and "1,234-parameter BLOOM (4 layers" in card
    assert "GELU MLP of 4 × hidden (768) instead of a SwiGLU of 512" in card and "share 0.25" in card
    assert "For comparison, tiny-nope" in card and "For comparison, tiny-rope" in card
    low, high = wilson_interval(1, 2)
    assert f"| 8 (2L) | 0.50 [{low:.2f}–{high:.2f}] | 0.70 | 1.50 |" in card
    assert "the retrieval head (layer 0, head 1: the most mass on the key within L)" in card
    # a passkey phase run from a pretrained folder (--init-from): its steps, LR and both times
    recipe |= {"kind": "nope", "passkey_steps": 300, "passkey_lr": 5e-4}
    training |= {"recipe": recipe, "pretraining_train_loss_mean_last_50": 3.4, "wall_s": 1800.0}
    training["init_from"] = {"path": "x/pre", "wall_s": 1500.0, "threads": 2, "torch": "2.13.0"}
    card = model_card(report("x/tiny-nope", 3.0), training, [], record)
    assert "a passkey phase of 300 steps" in card and "constant LR 0.0005, with a share 0.25" in card
    assert (
        "25.0 min on 2 CPU threads, then the passkey phase (`--init-from`) 5.0 min on 1 CPU thread (torch"
        in card
    )
    assert "3.400 at the end of pretraining" in card


def test_the_passkey_phase_follows_pretraining_and_init_from_skips_it(tmp_path, text_file, monkeypatch):
    """--passkey-steps: N more steps at the constant --passkey-lr with a fresh AdamW, passkey documents
    only there; --init-from a finished run of the recipe's pretraining runs only the phase and gives the
    same weights as the whole run, keeps that run's snapshots, and resumes exactly."""
    from entropy_lens.data import packed_stream
    from entropy_lens.training.batches import training_batch

    pre = micro(text_file, train_len=200, batch=2)
    recipe = dataclasses.replace(pre, passkey_share=0.5, passkey_steps=3, passkey_lr=5e-4)
    assert recipe.pretraining() == pre and recipe.total_steps == 9
    assert lr_at(recipe, 5) == lr_at(pre, 5) and lr_at(recipe, 6) == lr_at(recipe, 8) == 5e-4
    tokenizer = train_bpe([text_file.read_text()], 300)
    stream, _ = packed_stream(tokenizer, str(text_file))
    assert np.array_equal(
        training_batch(recipe, stream, tokenizer, 5), training_batch(pre, stream, tokenizer, 5)
    )
    assert not np.array_equal(
        training_batch(recipe, stream, tokenizer, 6)[1], training_batch(pre, stream, tokenizer, 6)[1]
    )

    whole = train_tiny(recipe, tmp_path / "whole", progress=False, snapshots=(2,))
    base = train_tiny(pre, tmp_path / "base", progress=False, snapshots=(2,))
    tuned = train_tiny(recipe, tmp_path / "tuned", progress=False, snapshots=(2,), init_from=base)
    assert all(np.array_equal(x, weights(tuned)[k]) for k, x in weights(whole).items())
    assert all(np.array_equal(x, weights(tuned / "step-2")[k]) for k, x in weights(base / "step-2").items())
    facts = json.loads((tuned / "training.json").read_text())
    # the pretraining named from the model's folder, not by this machine's path (issue 70)
    assert facts["init_from"]["path"] == "../base" and facts["tokens_seen"] == 9 * 2 * 200
    assert (
        facts["pretraining_train_loss_mean_last_50"]
        == json.loads((base / "training.json").read_text())["final_train_loss_mean_last_50"]
    )

    for crash, parent in ((8, base), (6, None)):  # inside the phase; at its first step (a fresh optimiser)
        monkeypatch.setattr(data_module, "random_windows", crash_at(crash))
        with pytest.raises(KeyboardInterrupt):
            train_tiny(recipe, tmp_path / f"r{crash}", progress=False, checkpoint_every=1, init_from=parent)
        monkeypatch.undo()
        resumed = train_tiny(recipe, tmp_path / f"r{crash}", progress=False, init_from=parent)
        assert all(np.array_equal(x, weights(resumed)[k]) for k, x in weights(whole).items())

    for bad, match in (
        (dataclasses.replace(recipe, lr=1e-2), "lr differ"),
        (pre, "needs --passkey-steps"),
    ):
        with pytest.raises(EntropyLensError, match=match):
            train_tiny(bad, tmp_path / "bad", progress=False, init_from=base)
    with pytest.raises(EntropyLensError, match="no step-4/"):
        train_tiny(recipe, tmp_path / "bad", progress=False, init_from=base, snapshots=(4,))
    with pytest.raises(EntropyLensError, match="is a snapshot"):
        train_tiny(recipe, tmp_path / "bad", progress=False, init_from=base / "step-2")
    with pytest.raises(EntropyLensError, match="needs a --passkey-share"):
        dataclasses.replace(recipe, passkey_share=0.0).check()


def test_an_interrupt_saves_the_last_whole_step_and_resume_is_exact(tmp_path, text_file, monkeypatch):
    """Ctrl-C or SIGTERM (a KeyboardInterrupt) between checkpoints saves the steps done since the last one
    (here none had been written: checkpoint_every=100), and the resumed run's weights and log are the
    uninterrupted run's."""
    from entropy_lens.training.checkpoint import read_checkpoint

    recipe = micro(text_file)
    whole = train_tiny(recipe, tmp_path / "a", progress=False)
    real_windows = data_module.random_windows
    monkeypatch.setattr(data_module, "random_windows", crash_at(5))
    with pytest.raises(KeyboardInterrupt):
        train_tiny(recipe, tmp_path / "r", progress=False, checkpoint_every=100)
    state = read_checkpoint(tmp_path / "r.partial" / "checkpoint.pt")
    assert state["step"] == 5 and [e["step"] for e in state["log"]] == [1, 2, 3, 4, 5]
    monkeypatch.setattr(data_module, "random_windows", real_windows)
    resumed = train_tiny(recipe, tmp_path / "r", resume=True, progress=False)
    a, b = weights(whole), weights(resumed)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    log = lambda folder: json.loads((folder / "training.json").read_text())["log"]
    assert [e["loss"] for e in log(whole)] == [e["loss"] for e in log(resumed)]
