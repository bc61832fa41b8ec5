"""Unbounded or malformed input (issue 39, items 8, 10, 12, 13, 15): every numeric setting declares its
range once (`settings.setting(at_least=, above=, at_most=)`) and is checked, by its flag's argparse type
and by the dataclass when it is made, before any model loads; a malformed passkey record is one line; the
--threads ceiling; the figures' --config types; a checkpoint's ignored remote code is said."""

import dataclasses
import json
import typing

import numpy as np
import pytest

from entropy_lens.cli import build_parser, main
from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.configs import (
    HeadSearchConfig,
    PasskeyConfig,
    PerplexityConfig,
    ScanConfig,
)
from entropy_lens.settings import MAX_TOKENS, SETTING


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("entropy-lens: error: "), err
    return err[0]


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: every check below must come first."""
    import entropy_lens.runs.passkey as passkey_run
    import entropy_lens.runs.scan as scan_run

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the settings were checked")

    monkeypatch.setattr(passkey_run, "load_variant", refuse)
    monkeypatch.setattr(scan_run, "load_variant", refuse)


# item 8: passkey lengths, depths, keys and seed


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (
            ["--lens", "100000000000000000000"],
            f"--lens must be at least 1 and at most {MAX_TOKENS} (got 100000000000000000000)",
        ),
        (["--lens", "-5"], "--lens must be at least 1 and at most"),
        (
            ["--lens", "256", "--seed", "-1"],
            "--seed must be at least 0 and at most 4294967295 (got -1); pass --seed 0",
        ),
        (
            ["--lens", "256", "--depths", "100000000000000000000"],
            "--depths must be at least 1 and at most 1000",
        ),
        (
            ["--lens", "256", "--keys", "0"],
            "--keys must be at least 1 and at most 1000 (got 0); pass --keys 1",
        ),
        (["--lens", "256", "--train-len", "0"], "--train-len must be at least 1 and at most"),
        (["--lens", "256", "--scale", "nan"], "--scale must be a finite number"),
    ],
)
def test_passkey_numbers_out_of_range_are_one_line_before_the_model_loads(
    flags, words, tmp_path, capsys, no_model
):
    out = tmp_path / "pk.json"
    assert main(["passkey", "tiny-nope", *flags, "--out", str(out)]) == 2
    assert words in _one_line_error(capsys)
    assert not out.exists()


def test_the_python_path_meets_the_same_check_in_the_same_words(capsys):
    """A config made in Python (or by `dataclasses.replace`) is checked as its flags are."""
    with pytest.raises(EntropyLensError) as made:
        PasskeyConfig(model="tiny-nope", lengths=(10**20,))
    assert main(["passkey", "tiny-nope", "--lens", str(10**20), "--out", "x.json"]) == 2
    assert _one_line_error(capsys) == f"entropy-lens: error: {made.value}"
    config = PasskeyConfig(model="tiny-nope", lengths=(256,))
    with pytest.raises(EntropyLensError, match="--seed must be at least 0 and at most"):
        dataclasses.replace(config, seed=-1)
    with pytest.raises(EntropyLensError, match="--lens must be a list of whole numbers"):
        PasskeyConfig(model="tiny-nope", lengths=(256.5,))
    with pytest.raises(
        EntropyLensError, match="--samples must be a whole number .got 'abc'.; pass --samples 8"
    ):
        ScanConfig(model="m", length=64, samples="abc")
    with pytest.raises(EntropyLensError, match="--len must be at least 2 and at most"):
        HeadSearchConfig(model="m", length=10**20)
    with pytest.raises(EntropyLensError, match="--stride must be at least 1 and at most"):
        PerplexityConfig(model="m", lengths=(64,), stride=0)


def test_a_passkey_prompt_never_grows_beyond_a_checked_length():
    """The prompt builder checks the length before it tokenises or grows anything: a tokenizer that
    cannot be called shows it (it used to grow a filler of 1e20 tokens: 16 GB in a minute)."""
    from entropy_lens.data.passkey import passkey_prompt

    rng = np.random.default_rng(0)
    for length in (10**20, MAX_TOKENS + 1, 0):
        with pytest.raises(EntropyLensError, match="--lens must be at least 1 and at most"):
            passkey_prompt(object(), length=length, depth=0.0, key=12345, rng=rng)
    with pytest.raises(EntropyLensError, match="depth must be at least 0 and at most 1"):
        passkey_prompt(object(), length=256, depth=1.5, key=12345, rng=rng)


# every numeric setting has a declared range


def _settings_classes():
    from entropy_lens.figures.config import FiguresConfig
    from entropy_lens.view.config import ViewConfig

    return [ScanConfig, PerplexityConfig, HeadSearchConfig, PasskeyConfig, FiguresConfig, ViewConfig]


@pytest.mark.parametrize("cls", _settings_classes(), ids=lambda c: c.__name__)
def test_every_numeric_setting_declares_its_range(cls):
    """Each int or float field (or list of them) carries a lower bound, and each whole number a ceiling,
    so that a mistyped 1e20 never reaches a loop or an allocation."""
    hints = typing.get_type_hints(cls)
    numeric = 0
    for field in dataclasses.fields(cls):
        kinds = set(typing.get_args(hints[field.name])) | {hints[field.name]}
        kinds |= {a for k in list(kinds) for a in typing.get_args(k)}
        if not kinds & {int, float}:
            continue
        numeric += 1
        spec = field.metadata.get(SETTING) or {}
        assert spec.get("at_least") is not None or spec.get("above") is not None, field.name
        if int in kinds:
            assert spec.get("at_most") is not None, field.name
    assert numeric >= 2


def test_a_flags_range_is_in_its_help():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = sub.choices["passkey"].format_help()
    assert f"at least 1 and at most {MAX_TOKENS}" in " ".join(text.split())


# item 12: --threads has a hard ceiling


def test_threads_above_the_ceiling_are_one_line_before_torch_threads_change(capsys, monkeypatch):
    """--threads 100000 used to warn, then die of a MemoryError and a segfault in torch's pools."""
    import os

    from entropy_lens.runs.threads import THREAD_VARIABLES, max_threads, set_threads

    assert max_threads() == 4 * (os.cpu_count() or 1)
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for n in ("100000", str(max_threads() + 1)):
        assert main(["fit", "no-such-sweep", "--threads", n]) == 2
        line = _one_line_error(capsys)
        assert f"--threads {n} is above the ceiling of {max_threads()}" in line and "or fewer" in line
    with pytest.raises(EntropyLensError, match="above the ceiling"):
        set_threads(100000)  # the Python path: refused before the variables or torch are touched
    assert not any(name in os.environ for name in THREAD_VARIABLES)
    args = build_parser().parse_args(["fit", "x", "--threads", str(max_threads())])
    assert args.threads == max_threads()  # the ceiling itself is allowed


# item 13: the figures' --config is checked through the same declarations


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('samples: "abc"', "samples must be a whole number (got 'abc'); write samples: 128"),
        ("passkey_lengths: 5", "passkey_lengths must be a list of finite numbers (got 5)"),
        ('passkey_lengths: [1, "a"]', "passkey_lengths must be a list of finite numbers"),
        ("passkey_lengths: [1, 2000]", "passkey_lengths must be above 0 and at most 1024 (got 2000)"),
        ("short: 0", "short must be at least 1 and at most 1024 (got 0)"),
        ("seed: -1", "seed must be at least 0 and at most"),
        ("train_len: true", "train_len must be a whole number (got True)"),
        ("nope: 5", "nope must be text (got 5)"),
        ("1: 2", "unknown settings ['1']"),
        ("fig1_scale: .inf", "fig1_scale must be a finite number (got inf)"),
    ],
)
def test_a_figures_config_of_the_wrong_types_is_one_line(text, words, tmp_path, capsys, monkeypatch):
    import entropy_lens.figures.pipeline as figures_run

    monkeypatch.setattr(figures_run, "make_figures", lambda *a, **k: pytest.fail("ran with a bad config"))
    config = tmp_path / "figures.yaml"
    config.write_text(text + "\n")
    assert main(["figures", "--config", str(config), "--cached-only", "--out", str(tmp_path)]) == 2
    line = _one_line_error(capsys)
    assert f"{config}: " in line and words in line


def test_a_binary_figures_config_is_one_line(tmp_path, capsys):
    config = tmp_path / "figures.yaml"
    config.write_bytes(bytes(range(256)) * 4)
    assert main(["figures", "--config", str(config), "--cached-only", "--out", str(tmp_path)]) == 2
    assert "is not a text file" in _one_line_error(capsys)


def test_figures_config_made_in_python_is_checked():
    from entropy_lens.figures.config import FiguresConfig

    with pytest.raises(EntropyLensError, match="--samples must be a whole number"):
        FiguresConfig(samples="abc")
    with pytest.raises(EntropyLensError, match="passkey_depths must be at least 1 and at most 1000"):
        FiguresConfig(passkey_depths=0)


# item 15: view's --train-len and --points; remote code that did not run


@pytest.mark.parametrize("flag", ["--train-len", "--points"])
def test_view_refuses_a_zero_length_or_bin_count(flag, tmp_path, capsys, monkeypatch):
    import entropy_lens.view as view_package
    from entropy_lens.view.page import view as page_view

    monkeypatch.setattr(view_package, "view", lambda *a, **k: pytest.fail("view ran with a bad setting"))
    out = tmp_path / "v.html"
    assert main(["view", "x.npz", flag, "0", "--out", str(out)]) == 2
    assert f"{flag} must be at least " in _one_line_error(capsys) and not out.exists()
    with pytest.raises(EntropyLensError, match=f"{flag} must be at least "):  # the Python API: the same check
        page_view([], **{flag.removeprefix("--").replace("-", "_"): 0})


def test_an_ignored_auto_map_is_said_in_one_line_and_recorded(tmp_path, capsys):
    """A config whose auto_map names its own model code but whose model_type is built in loads the
    built-in class without trust_remote_code: the note says so, the passkey record and the scan's meta keep it."""
    from tiny import make_tiny_dir

    from entropy_lens.models import load_model
    from entropy_lens.runs.passkey import passkey
    from entropy_lens.runs.scan import scan

    folder = make_tiny_dir(tmp_path / "remote")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_mine.MyForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_mine.py").write_text("raise SystemExit('the remote code ran')\n")
    capsys.readouterr()
    lm = load_model(str(folder))
    notes = [line for line in capsys.readouterr().err.splitlines() if "auto_map" in line]
    assert len(notes) == 1 and "modeling_mine.MyForCausalLM" in notes[0]
    assert "LlamaForCausalLM" in notes[0] and "--trust-remote-code" in notes[0]
    assert (lm.model_class, lm.remote_code_ignored) == ("LlamaForCausalLM", "modeling_mine.MyForCausalLM")
    record = passkey(PasskeyConfig(model=str(folder), lengths=(200,), depths=1, keys=1), progress=False)
    assert record["model"]["remote_code_ignored"] == "modeling_mine.MyForCausalLM"
    assert record["model"]["model_class"] == "LlamaForCausalLM"
    meta = scan(
        ScanConfig(model=str(folder), length=32, samples=1, data="austen:northanger"), progress=False
    ).meta
    assert (meta["model_class"], meta["remote_code_ignored"]) == (
        "LlamaForCausalLM",
        "modeling_mine.MyForCausalLM",
    )


def test_a_checkpoint_without_remote_code_gets_no_note(tiny_dir, capsys):
    from entropy_lens.models import load_model

    capsys.readouterr()
    lm = load_model(str(tiny_dir))
    assert lm.remote_code_ignored is None and "auto_map" not in capsys.readouterr().err


# item 10: malformed passkey records


def _record(config: PasskeyConfig) -> dict:
    """A well-formed two-cell record of `config` (one trial each), as runs/passkey.py writes it."""
    trial = {"key": 12345, "position": 40, "answer": " 12345", "answer_ids": [1], "correct": True}
    trial |= {"entropy": [[1.0, 2.0]], "needle_mass": [[0.5, 0.25]]}
    cells = [
        {"length": 256, "depth": d, "correct": 1, "trials": 1, "accuracy": 1.0, "position": 40.0}
        | {"per_trial": [dict(trial)], "wall_s": 0.1}
        for d in (0.0, 0.5)
    ]
    model = {"config_hash": "0123456789abcdef", "n_layers": 1, "n_heads": 2}
    return {"kind": "entropy_lens.passkey", "config": config.to_dict(), "model": model, "results": cells}


def _entries_missing_keys(r):
    del r["results"][1]["accuracy"]


def _results_a_string(r):
    r["results"] = "none"


def _no_model(r):
    del r["model"]


def _a_string_depth(r):
    r["results"][0]["depth"] = "0.5"


def _a_trial_missing_its_mass(r):
    del r["results"][0]["per_trial"][0]["needle_mass"]


def _a_ragged_table(r):
    r["results"][1]["per_trial"][0]["entropy"] = [[1.0], [2.0, 3.0]]


DAMAGE = [
    (_entries_missing_keys, 'results[1] has no "accuracy"'),
    (_results_a_string, '"results" is str, not a list'),
    (_no_model, '"model" has no config_hash'),
    (_a_string_depth, "results[0][\"depth\"] is '0.5', not a number"),
    (_a_trial_missing_its_mass, 'results[0].per_trial[0] has no "needle_mass"'),
    (_a_ragged_table, 'results[1].per_trial[0]["entropy"] is not a [layers][heads] table'),
]


@pytest.mark.parametrize(("damage", "words"), DAMAGE, ids=[d.__name__.strip("_") for d, _ in DAMAGE])
def test_a_damaged_passkey_record_is_one_line_when_a_run_continues_it(
    damage, words, tmp_path, capsys, no_model
):
    config = PasskeyConfig(model="tiny-nope", lengths=(256,), depths=2, keys=1)
    out = tmp_path / "pk.json"
    record = _record(config)
    damage(record)
    out.write_text(json.dumps(record))
    before = out.read_text()
    argv = ["passkey", "tiny-nope", "--lens", "256", "--depths", "2", "--keys", "1", "--out", str(out)]
    assert main(argv) == 2
    line = _one_line_error(capsys)
    assert f"{out} is damaged: {words}" in line and "--force" in line
    assert out.read_text() == before  # left as it was


# what each table reads: passkey_table the cells' length, depth and accuracy; passkey_by_length the trials
TABLE_DAMAGE = [
    ("passkey_table", _entries_missing_keys),
    ("passkey_table", _results_a_string),
    ("passkey_table", _a_string_depth),
    ("passkey_by_length", _results_a_string),
    ("passkey_by_length", _a_trial_missing_its_mass),
    ("passkey_by_length", _a_ragged_table),
]


@pytest.mark.parametrize(
    ("reader", "damage"), TABLE_DAMAGE, ids=[f"{r}-{d.__name__.strip('_')}" for r, d in TABLE_DAMAGE]
)
def test_a_damaged_passkey_record_is_one_line_in_the_tables(reader, damage):
    from entropy_lens.analysis import passkey as analysis

    read = {"passkey_table": analysis.passkey_table, "passkey_by_length": analysis.passkey_by_length}[reader]
    record = _record(PasskeyConfig(model="m", lengths=(256,), depths=2, keys=1))
    assert len(analysis.passkey_table(record)) == 2 and len(analysis.passkey_by_length(record, 256)) == 1
    damage(record)
    with pytest.raises(EntropyLensError) as err:
        read(record, *([256] if reader == "passkey_by_length" else []))
    words = dict(DAMAGE)[damage]
    assert str(err.value) == f"the passkey record is damaged: {words}; run `entropy-lens passkey` again"


def test_a_passkey_heatmap_refuses_what_is_no_accuracy():
    import matplotlib
    import pandas as pd

    matplotlib.use("Agg")
    from entropy_lens.plotting import passkey_heatmap

    for table in (
        pd.DataFrame([[1.5]], index=[0.0], columns=[256]),
        pd.DataFrame([["a"]], index=[0.0], columns=[256]),
        pd.DataFrame([[0.5]], index=[0.0], columns=[1.5]),
    ):
        with pytest.raises(EntropyLensError, match="passkey table"):
            passkey_heatmap(table, context_length=256, name="x")
    ax = passkey_heatmap(
        pd.DataFrame([[0.5, np.nan]], index=[0.0], columns=[128, 256]), context_length=256, name="x"
    )
    assert [t.get_text() for t in ax.texts] == ["0.5"]  # the missing cell is left blank
    import matplotlib.pyplot as plt

    plt.close("all")
