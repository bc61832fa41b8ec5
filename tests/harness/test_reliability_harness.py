"""Issue 48's harness items: each input the harness reads from outside a flag (lm-eval's --model_args,
--metadata, --gen-kwargs, a task folder) is typed and checked before a model loads, in one line; booleans
are parsed, never taken by truthiness; --log-samples never overwrites; --quiet is quiet; the files guide says
which files run code. Fast: every refusal here comes before lm-eval's task index or a model."""

import ast
import logging
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from lm_eval_runs import HARNESS_TASKS, harness_args, harness_command
from tqdm import tqdm

import entropy_lens.harness.passkey as harness_passkey
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.harness.config import (
    EvalConfig,
    HarnessModelConfig,
    generation_settings,
    parse_bool,
    task_metadata_values,
)
from entropy_lens.harness.evaluate import quiet_output
from entropy_lens.harness.model import EntropyLensLM
from entropy_lens.models import checkpoint_tokenizer

ROOT = Path(__file__).parents[2]


def _eval(tmp_path, capsys, *flags, include=HARNESS_TASKS):
    """`entropy-lens eval tiny-nope FLAGS` into tmp_path/r.json: (exit status, its one stderr line)."""
    argv = ["eval", "tiny-nope", *flags, "--include-path", str(include), "--device", "cpu", "--quiet"]
    code = main([*argv, "--out", str(tmp_path / "r.json"), "--bootstrap-iters", "0"])
    err = capsys.readouterr().err.strip()
    assert code != 2 or len(err.splitlines()) == 1, err
    return code, err


# item 10: one boolean parser, never truthiness


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, True), (0, False), ("TRUE", True), ("false", False), ("Yes", True)]
    + [("no", False), ("1", True), ("0", False), (" No ", False)],
)
def test_parse_bool_reads_the_words(value, expected):
    assert parse_bool(value, name="x") is expected


@pytest.mark.parametrize("value", ["maybe", "", "2", 2, -1, 0.5, 1.0, None, [True]])
def test_parse_bool_refuses_the_rest_in_one_line(value):
    with pytest.raises(EntropyLensError, match=r"^flag_x must be true or false \(or 1/0, yes/no") as err:
        parse_bool(value, name="flag_x")
    assert "\n" not in str(err.value)


def test_metadata_trust_remote_code_false_runs_no_tokenizer_code(monkeypatch):
    """--metadata '{"trust_remote_code": "false"}' reached the tokenizer as bool("false"), i.e. True."""
    seen = []

    def tokenizer(name, **kwargs):
        seen.append(kwargs["trust_remote_code"])
        return checkpoint_tokenizer(name, revision=kwargs["revision"])

    monkeypatch.setattr(harness_passkey, "checkpoint_tokenizer", tokenizer)
    for text, expected in (("false", False), ("No", False), ("0", False), ("yes", True)):
        harness_passkey.passkey_dataset(
            pretrained="tiny-nope",
            passkey_length=128,
            passkey_depths=1,
            passkey_keys=1,
            trust_remote_code=text,
        )
        assert seen.pop() is expected, text
    with pytest.raises(EntropyLensError, match="metadata trust_remote_code must be true or false"):
        harness_passkey.passkey_dataset(pretrained="tiny-nope", passkey_length=64, trust_remote_code="maybe")
    assert task_metadata_values({"trust_remote_code": "false"}) == {"trust_remote_code": False}
    config = EvalConfig(model="tiny-nope", tasks="x", metadata='{"trust_remote_code": "FALSE"}')
    assert config.task_metadata() == {"trust_remote_code": False}


def test_model_args_booleans_are_parsed():
    """lm-eval's --model_args give text: trust_remote_code=no, nope=yes, add_bos_token=0."""
    config = HarnessModelConfig.from_model_args(
        {"pretrained": "tiny-nope", "trust_remote_code": "no", "nope": "yes"}
    )
    assert config.trust_remote_code is False and config.nope is True
    assert HarnessModelConfig.from_model_args({"pretrained": "x", "trust_remote_code": 1}).trust_remote_code
    with pytest.raises(EntropyLensError, match="--model_args trust_remote_code must be true or false"):
        HarnessModelConfig.from_model_args({"pretrained": "x", "trust_remote_code": "maybe"})
    with pytest.raises(EntropyLensError, match="--model_args add_bos_token must be true or false"):
        EntropyLensLM(pretrained="tiny-nope", add_bos_token="maybe")  # before the model loads
    lm = EntropyLensLM(pretrained="tiny-nope", device="cpu", add_bos_token="no", logits_cache="0")
    assert lm.add_bos_token is False and lm.logits_cache is False


# item 8: --log-samples never overwrites


def test_log_samples_refuses_an_existing_samples_file_before_the_run(tmp_path, capsys):
    samples = tmp_path / "r.samples.json"
    samples.write_text("keep")
    code, err = _eval(tmp_path, capsys, "--tasks", "el_next_sentence", "--limit", "1", "--log-samples")
    assert code == 2 and f"{samples} already exists; pass --force" in err
    assert samples.read_text() == "keep" and not (tmp_path / "r.json").exists()
    samples.unlink()
    samples.mkdir()
    code, err = _eval(tmp_path, capsys, "--tasks", "el_next_sentence", "--log-samples", "--force")
    assert code == 2 and f"{samples} is a folder, where --log-samples would write" in err


# item 14: one line naming the fix, before anything loads


def test_gen_kwargs_are_checked_before_the_model_loads(tmp_path, capsys):
    with pytest.raises(
        EntropyLensError, match=r"--gen-kwargs num_beams must be a whole number \(got 'abc'\)"
    ):
        EvalConfig(model="tiny-nope", tasks="x", gen_kwargs="num_beams=abc").check()
    code, err = _eval(tmp_path, capsys, "--tasks", "el_generate", "--gen-kwargs", "num_beams=abc")
    assert code == 2 and "--gen-kwargs num_beams must be a whole number" in err
    for text, said in [
        ("num_beams", "'num_beams' is not KEY=VALUE"),
        ("num_beams=0", "num_beams must be at least 1"),
        ("top_p=1.5", "top_p must be at least 0 and at most 1 (got 1.5)"),
        ("temperature=inf", "temperature must be a finite number"),
        ("do_sample=maybe", "--gen-kwargs do_sample must be true or false"),
    ]:
        with pytest.raises(EntropyLensError, match=re_escape(said)):
            generation_settings(text)
    assert generation_settings("num_beams=5,do_sample=no,until=x,temperature=0") == {
        "num_beams": 5,
        "do_sample": False,
        "until": "x",
        "temperature": 0.0,
    }


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_lm_eval_model_without_pretrained_is_one_line():
    """lm-eval builds the model from --model_args alone: without pretrained it was a TypeError."""
    with pytest.raises(EntropyLensError, match="needs a checkpoint: pass --model_args pretrained=CKPT"):
        EntropyLensLM.create_from_arg_string("scale=1.2", {"device": "cpu"})


@pytest.mark.slow
def test_lm_eval_command_line_refusals_are_one_line(tmp_path, monkeypatch):
    """python -m entropy_lens.harness (lm-eval's own CLI): a refused model argument is one stderr line and
    exit status 2, not a traceback. One child (its imports and lm-eval's index of its own tasks: 20 s) for
    the command line; the second refusal in this process, as that command reaches it: its arguments read
    by lm-eval's own parser, the model made by lm-eval's call (`create_from_arg_obj`), whose
    EntropyLensError the command prints as the first's."""
    run = harness_command("scale=1.2", tmp_path, "--device", "cpu", "--limit", "1")
    assert run.returncode == 2, run.stderr[-3000:]
    said = "pass --model_args pretrained=CKPT"
    assert said in run.stderr and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.stderr.strip().splitlines()[-1].startswith("entropy-lens: error: ")
    from lm_eval._cli import HarnessCLI

    args = harness_args("pretrained=tiny-nope,max_length=-5", "--device", "cpu", "--limit", "1")
    monkeypatch.setattr(sys, "argv", ["lm_eval", "run", *args])
    parsed = HarnessCLI().parse_args()
    with pytest.raises(EntropyLensError, match="--model_args max_length must be at least 2") as err:
        EntropyLensLM.create_from_arg_obj(parsed.model_args, {"device": parsed.device})
    assert "\n" not in str(err.value)


# item 15: the messages that named the wrong thing, and --quiet


def test_model_args_values_are_named_as_given():
    """lm-eval parses max_length=-5 as -5.0: the message says -5, and names max_length, not --max-length."""
    with pytest.raises(
        EntropyLensError, match=r"^--model_args max_length must be at least 2 .*\(got -5\); pass max_length=2"
    ):
        HarnessModelConfig.from_model_args({"pretrained": "tiny-nope", "max_length": -5.0})
    with pytest.raises(EntropyLensError, match=r"max_length must be a whole number \(got 2.5\)"):
        HarnessModelConfig.from_model_args({"pretrained": "tiny-nope", "max_length": 2.5})
    assert (
        HarnessModelConfig.from_model_args({"pretrained": "tiny-nope", "max_length": 256.0}).max_length == 256
    )


def test_metadata_passkey_settings_are_named_as_metadata_keys(tmp_path, capsys):
    code, err = _eval(
        tmp_path, capsys, "--tasks", "entropy_lens_passkey_64", "--metadata", '{"passkey_depths": -1}'
    )
    assert code == 2 and err.startswith("entropy-lens: error: --metadata passkey_depths must be at least 1")
    assert "--depths" not in err
    with pytest.raises(EntropyLensError, match=r"^metadata passkey_keys must be a whole number \(got 'x'\)"):
        harness_passkey.passkey_dataset(pretrained="tiny-nope", passkey_length=64, passkey_keys="x")


def test_an_unparsable_task_yaml_is_named(tmp_path, capsys):
    """lm-eval's index skips a YAML it cannot parse without a word, and its task is then "unknown"."""
    tasks = tmp_path / "tasks"
    (tasks / "sub").mkdir(parents=True)
    (tasks / "good.yaml").write_text("task: good\nprocess_results: !function utils.f\n")
    (tasks / "sub" / "bad.yaml").write_text("task: bad\n  dataset_path: [x\n")
    code, err = _eval(tmp_path, capsys, "--tasks", "bad", include=tasks)
    assert code == 2 and f"--include-path: {tasks / 'sub' / 'bad.yaml'} is not valid YAML (line 2" in err
    (tasks / "sub" / "bad.yaml").unlink()
    (tasks / "__pycache__").mkdir()
    (tasks / "__pycache__" / "skipped.yaml").write_text("[")  # lm-eval does not read it either
    from entropy_lens.harness.evaluate import check_task_folder

    check_task_folder(tasks)  # !function tags are read as text: nothing is imported


def test_quiet_silences_progress_bars_and_lm_eval_logs(capsys, caplog):
    """lm-eval passes disable= to its bars and tqdm reads TQDM_DISABLE at import, so the old environment
    variable left every bar on."""
    log = logging.getLogger("lm_eval.api.task")
    with quiet_output():
        for _ in tqdm(range(3), disable=False, desc="bar"):
            pass
        log.warning("a warning")
        log.error("an error")
    assert "bar" not in capsys.readouterr().err
    assert [r.getMessage() for r in caplog.records] == ["an error"]
    for _ in tqdm(range(3), desc="bar"):  # put back
        pass
    assert "bar: 100%" in capsys.readouterr().err
    assert logging.getLogger("lm_eval").level != logging.ERROR


# item 11: which files run code, said where a user looks


def test_help_and_readme_say_which_files_run_code(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "It runs code: lm-eval imports the Python its YAML names (`!function" in help_text
    readme = (ROOT / "docs" / "guides" / "files.md").read_text(
        encoding="utf-8"
    )  # the guide, linked from the README
    start = readme.index("**Files you receive cannot run code.**")
    section = " ".join(readme[start : readme.index("\n- **", start)].split())
    assert "Nothing in the package unpickles" not in section
    for words in (
        "--include-path",
        "!function",
        "--trust-remote-code",
        "broadcast_object_list",
        "rank to rank",
    ):
        assert words in section, words


def test_only_the_ranks_of_one_run_pickle():
    """torch.distributed's *_object collectives pickle: only runs/distributed.py calls one (the files
    guide's "rank to rank")."""
    import entropy_lens

    objects = {"broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list"}
    objects |= {"send_object_list", "recv_object_list"}
    package = Path(entropy_lens.__file__).parent
    calls = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in objects:
                calls.add(str(path.relative_to(package)))
    assert calls == {"runs/distributed.py"}
    readme = " ".join((package.parent / "docs" / "guides" / "files.md").read_text(encoding="utf-8").split())
    source = (package / "runs" / "distributed.py").read_text(encoding="utf-8")
    for name in sorted(objects):  # every pickling collective the package calls is named in the guide
        assert (f"dist.{name}(" not in source) or f"`{name}`" in readme or f"distributed.{name}`" in readme


@pytest.mark.slow
@pytest.mark.xdist_group("lm-eval-index")  # conftest.py: lm-eval's own tasks indexed once
def test_a_task_whose_dataset_cannot_be_downloaded_is_one_line(tmp_path, capsys, monkeypatch):
    """A task that reads its data from the Hub, with the Hub out of reach: `datasets` raises the built-in
    ConnectionError after lm-eval's retries, which was a traceback."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "far.yaml").write_text(
        "task: far\ndataset_path: entropy-lens-tests/nowhere\noutput_type: loglikelihood\ntest_split: test\n"
        'doc_to_text: "{{text}}"\ndoc_to_target: " x"\nmetric_list:\n  - metric: acc\n'
    )
    code, err = _eval(tmp_path, capsys, "--tasks", "far", include=tasks)
    assert code == 2 and "a task's dataset is not on this machine and cannot be downloaded" in err
