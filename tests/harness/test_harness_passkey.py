"""The passkey task as lm-eval tasks (entropy_lens/harness/passkey.py, harness/tasks/): the same trials as
`entropy-lens passkey` (same prompts, same greedy answers, same accuracy) through `entropy-lens eval`, on
the embedded models, unmodified and with a variant."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.harness import TASKS_DIR
from entropy_lens.harness.passkey import passkey_dataset, passkey_documents, passkey_length
from entropy_lens.models import checkpoint_tokenizer
from entropy_lens.runs.configs import PasskeyConfig
from entropy_lens.runs.passkey import passkey

ROOT = Path(__file__).parents[2]


def test_task_files_are_what_the_tool_writes():
    spec = importlib.util.spec_from_file_location("passkey_tasks", ROOT / "tools" / "passkey_tasks.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    there = {p.name: p.read_text(encoding="utf-8") for p in TASKS_DIR.glob("entropy_lens_passkey_*.yaml")}
    assert there == tool.expected(), "run: python tools/passkey_tasks.py"
    assert passkey_length("entropy_lens_passkey_2048") == 2048 and passkey_length("hellaswag") is None


def test_the_packages_tasks_alone_skip_lm_evals_index(monkeypatch):
    """`entropy-lens eval` of the package's tasks indexes them alone (lm-eval's ~14,000 YAMLs: 15 s on one
    core); another task's name, or an --include-path, gets lm-eval's own tasks beside them
    (evaluate.task_manager)."""
    import lm_eval.tasks

    from entropy_lens.harness.evaluate import task_manager

    names = ["entropy_lens_passkey_128", "entropy_lens_passkey_256"]
    own = task_manager(names, None, metadata={})
    assert set(names) <= set(own.all_tasks) and "hellaswag" not in own.all_tasks
    made = []

    class Recorded:  # lm-eval's index, recorded instead of built
        def __init__(self, include_path, include_defaults=True, metadata=None):
            made.append((include_path, include_defaults))
            self.all_tasks = own.all_tasks if not include_defaults else [*own.all_tasks, "hellaswag"]

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Recorded)
    assert "hellaswag" in task_manager([*names, "hellaswag"], None, metadata={}).all_tasks
    task_manager(names, "my_tasks", metadata={})
    package = [str(TASKS_DIR)]
    assert made == [(package, False), (package, True), ([*package, str(Path("my_tasks").resolve())], True)]


def test_documents_are_the_passkey_commands_prompts():
    tokenizer = checkpoint_tokenizer("tiny-nope")
    docs = passkey_documents(tokenizer, length=128, depths=2, keys=3, seed=42)
    assert [(d["depth"], d["trial"]) for d in docs] == [
        (0.0, 0),
        (0.0, 1),
        (0.0, 2),
        (0.5, 0),
        (0.5, 1),
        (0.5, 2),
    ]
    for doc in docs:
        ids = tokenizer(doc["context"])["input_ids"]
        assert len(ids) + doc["answer_tokens"] == 128  # prompt and answer fill the window
        assert doc["answer"].strip() == str(doc["key"]) and str(doc["key"]) in doc["context"]
    dataset = passkey_dataset(pretrained="tiny-nope", passkey_length=128, passkey_depths=2, passkey_keys=3)
    assert dataset["test"].to_list() == docs


def test_documents_refuse_what_they_cannot_build():
    with pytest.raises(EntropyLensError, match="pass the model as pretrained=CKPT"):
        passkey_dataset(passkey_length=128)
    with pytest.raises(EntropyLensError, match="needs its window length"):
        passkey_dataset(pretrained="tiny-nope")
    with pytest.raises(EntropyLensError, match="^metadata passkey_keys must be at least 1"):
        passkey_dataset(pretrained="tiny-nope", passkey_length=128, passkey_keys=0)


def _compare(tmp_path, model: str, lengths: tuple[int, ...], variant: dict):
    """`entropy-lens passkey` and `entropy-lens eval` on the passkey tasks, same trials: per trial the same
    generated answer and verdict; per length the same accuracy."""
    settings = {"depths": 2, "keys": 2, "seed": 7}
    record = passkey(
        PasskeyConfig(model=model, lengths=lengths, device="cpu", **settings, **variant), progress=False
    )
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in variant.items()]
    tasks = ",".join(f"entropy_lens_passkey_{w}" for w in lengths)
    metadata = json.dumps({f"passkey_{k}": v for k, v in settings.items()})
    out = tmp_path / "eval.json"
    argv = [
        "eval",
        model,
        *flags,
        "--tasks",
        tasks,
        "--metadata",
        metadata,
        "--max-length",
        str(max(lengths)),
    ]
    argv += ["--device", "cpu", "--bootstrap-iters", "0", "--log-samples", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    results = json.loads(out.read_text())
    samples = json.loads((tmp_path / "eval.samples.json").read_text())
    for length in lengths:
        cells = [c for c in record["results"] if c["length"] == length]
        expected = {
            (c["depth"], t): (trial["answer"], trial["correct"])
            for c in cells
            for t, trial in enumerate(c["per_trial"])
        }
        task = f"entropy_lens_passkey_{length}"
        got = {
            (s["doc"]["depth"], s["doc"]["trial"]): (s["resps"][0][0], s["exact_match"] == 1.0)
            for s in samples[task]
        }
        assert got == expected, task
        accuracy = sum(c["correct"] for c in cells) / sum(c["trials"] for c in cells)
        assert results["results"][task]["exact_match,none"] == pytest.approx(accuracy), task
    return results


@pytest.mark.slow
@pytest.mark.xdist_group("lm-eval-index")  # conftest.py: lm-eval's own tasks indexed once
def test_eval_accuracy_equals_the_passkey_command(tmp_path):
    results = _compare(tmp_path, "tiny-nope", (128,), {})
    assert results["results"]["entropy_lens_passkey_128"]["exact_match,none"] > 0  # the task is solved here


@pytest.mark.slow
@pytest.mark.xdist_group("lm-eval-index")
@pytest.mark.parametrize(
    "model,variant",
    [
        ("tiny-nope", {"scale": 1.2}),
        ("tiny-rope", {}),
        # rope scaling's variant: make test-full. Each encoding's family runs by default ([rope] holds RoPE
        # past its training length in make test, [nope-scale1.2] a variant's flag through eval), and
        # test_harness.py's test_every_variant_changes_what_the_model_scores[rope_scaling=linear:2] the flag
        pytest.param("tiny-rope", {"rope_scaling": "linear:2"}, marks=pytest.mark.full),
        ("tiny-alibi", {}),
    ],
    ids=["nope-scale1.2", "rope", "rope-linear2", "alibi"],
)
def test_eval_accuracy_equals_the_passkey_command_beyond_the_training_length(tmp_path, model, variant):
    """Not dynamic:2 here: transformers' dynamic NTK keeps the longest sequence it has seen until one
    shorter than L comes, so each answer depends on the trials before it, and lm-eval orders them by
    length, the passkey command by depth."""
    _compare(tmp_path, model, (128, 256), variant)
