"""What a new user tripped over (issue 51): SmolLM2's training length read from its GGUF, a misspelt
recorder keyword named in one line, figures whose legends carry what their captions used to."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from tiny import make_tiny_model

from entropy_lens.capture.recorder import EntropyRecorder
from entropy_lens.errors import EntropyLensError
from entropy_lens.models.gguf import context_length, gguf_train_len, read_gguf_metadata


def _gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _fake_gguf(path: Path, entries: list[tuple[str, int, bytes]]) -> Path:
    """A GGUF v3 header with `entries` (key, type code, packed value) and no tensors."""
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries))
    for key, kind, value in entries:
        out += _gguf_string(key) + struct.pack("<I", kind) + value
    path.write_bytes(out)
    return path


def test_context_length_from_fake_metadata():
    assert context_length({"general.architecture": "llama", "llama.context_length": 8192}) == 8192
    # the architecture's own key wins over another's
    meta = {"general.architecture": "qwen2", "llama.context_length": 1, "qwen2.context_length": 32768}
    assert context_length(meta) == 32768
    assert context_length({"gemma.context_length": 4096}) == 4096  # no architecture named: any key
    assert context_length({"general.architecture": "llama"}) is None
    assert context_length({"general.architecture": "llama", "llama.context_length": "8192"}) is None


def test_gguf_header_reader_skips_arrays(tmp_path):
    vocab = struct.pack("<IQ", 8, 2) + _gguf_string("a") + _gguf_string("bc")  # an array of 2 strings
    path = _fake_gguf(
        tmp_path / "m.gguf",
        [
            ("general.architecture", 8, _gguf_string("llama")),
            ("tokenizer.ggml.tokens", 9, vocab),
            ("llama.block_count", 4, struct.pack("<I", 30)),
            ("llama.context_length", 4, struct.pack("<I", 2048)),
            ("general.score", 6, struct.pack("<f", 0.5)),
        ],
    )
    meta = read_gguf_metadata(path)
    assert meta["general.architecture"] == "llama" and meta["llama.block_count"] == 30
    assert meta["tokenizer.ggml.tokens"] is None and meta["general.score"] == 0.5
    assert gguf_train_len(path) == 2048
    (tmp_path / "bad.gguf").write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(EntropyLensError, match="not a GGUF file"):
        gguf_train_len(tmp_path / "bad.gguf")


def test_declared_train_len_of_bundled_smollm2_without_conversion():
    from entropy_lens.models import declared_train_len

    assert declared_train_len("smollm2") == 8192  # the header only: no weights, no cache


@pytest.mark.slow
def test_loading_smollm2_reports_its_gguf_context_as_train_len():
    from entropy_lens.models import load_model

    assert load_model("smollm2").train_len == 8192


@pytest.mark.parametrize(
    ("wrong", "right"), [("scale", "scales"), ("stat", "stats"), ("first_key", "first_keys")]
)
def test_recorder_names_a_misspelt_keyword_in_one_line(wrong, right):
    with pytest.raises(TypeError) as info:
        EntropyRecorder(make_tiny_model(), **{wrong: 1.2})
    message = str(info.value)
    assert "\n" not in message and "ScaleSession" not in message
    assert message == f"EntropyRecorder() got an unexpected keyword {wrong!r}; did you mean {right}=?"


def test_recorder_lists_its_keywords_when_nothing_is_close():
    with pytest.raises(TypeError, match=r"unexpected keyword 'colour'; use scales, backend"):
        EntropyRecorder(make_tiny_model(), colour=1)


# --- figures that read without their captions ---------------------------------------------------------


@pytest.fixture
def _close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def _legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_figure1_legend_says_solid_is_entropy_and_dashed_is_log_perplexity(_close_figures):
    from sweeps import random_result

    from entropy_lens.plotting import entropy_loss

    ax = entropy_loss([("NoPE", random_result()), ("RoPE", random_result(seed=1))], style_key=True)
    texts = _legend_texts(ax)
    assert texts[:2] == ["NoPE", "RoPE"]
    assert "solid: entropy (left axis)" in texts and "dashed: log-perplexity (right axis)" in texts
    styles = {h.get_label(): h.get_linestyle() for h in ax.get_legend().legend_handles}
    assert (
        styles["solid: entropy (left axis)"] == "-" and styles["dashed: log-perplexity (right axis)"] == "--"
    )


def test_figure7_legend_names_the_red_best_loss_and_labels_l(_close_figures):
    from entropy_lens.analysis import Sweep, fit_scale_curve
    from entropy_lens.plotting import best_scale_by_position

    T, L = 400, 50
    s_star = 1 + 0.3 * np.log(np.maximum(np.arange(T), 1) / L)
    scales = np.round(np.arange(0.9, 2.0001, 0.05), 2)
    loss = np.stack([(s - s_star) ** 2 + 2 for s in scales])
    sweep = Sweep(scales=scales, loss=loss, entropy=None, train_len=L, model="m", length=T)
    ax = best_scale_by_position(sweep, fit_scale_curve(sweep))
    legend = ax.get_legend()
    colours = {h.get_label(): h.get_color() for h in legend.legend_handles}
    assert colours["its loss (right axis)"] == "tab:red"
    assert f"$L$ = {L} (training length)" in _legend_texts(ax)
    assert ax.right_ax.get_ylabel() == "log Perplexity (nats)"


def test_figure17_legend_names_the_percentile_band_and_l(_close_figures):
    from beyond_inputs import planted_curves

    from entropy_lens.plotting import stat_by_position

    ax = stat_by_position([("SmolLM2", planted_curves())], "max_prob", band=(10, 90), train_len=16)
    assert _legend_texts(ax) == ["SmolLM2", "10th–90th percentile of layers × heads", "$L$ = 16"]
    two = [("A", planted_curves()), ("B", planted_curves(model="b"))]
    texts = _legend_texts(stat_by_position(two, "max_prob", band=(25, 75)))
    assert (
        "A: 25th–75th percentile of layers × heads" in texts
        and "B: 25th–75th percentile of layers × heads" in texts
    )


def test_figure7_names_its_steps_from_the_training_record():
    from entropy_lens.figures.record import SweepFit
    from entropy_lens.figures.scales import trained_words
    from entropy_lens.training.training_record import passkey_phase_steps, training_record, training_steps

    recipe = training_record("tiny-nope")["recipe"]
    steps, passkey = training_steps("tiny-nope"), passkey_phase_steps("tiny-nope")
    assert (steps, passkey) == (recipe["steps"] + recipe["passkey_steps"], recipe["passkey_steps"])
    panel = SweepFit(
        model="tiny-nope", steps=steps, passkey_steps=passkey, sweep=None, fit=None, fit_smoothed=None
    )
    words = f"{steps} steps ({recipe['steps']} pretraining + {recipe['passkey_steps']} passkey)"
    assert trained_words(panel) == words
    early = SweepFit(
        model="tiny-nope-step300", steps=300, passkey_steps=0, sweep=None, fit=None, fit_smoothed=None
    )
    assert trained_words(early) == "300 steps"
    # the committed figure's words are the record's: 1,500 pretraining steps, as the model cards say
    readme = (Path(__file__).parents[2] / "figures" / "README.md").read_text()
    assert f"right: {words};" in readme and f"{steps} steps," not in readme


def test_a_model_folder_without_a_tokenizer_scans_token_ids(tiny_dir, tmp_path, capsys):
    """Token ids (.npy, as --help lists them) need no tokenizer (issue 70): a folder of weights and config
    alone scans them, to the numbers of the same folder with its tokenizer; text data on it is refused in
    one line that says to save a tokenizer."""
    import shutil

    from entropy_lens.cli import main
    from entropy_lens.results import ScanResult

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_dir / name, bare / name)
    assert not list(bare.glob("tokenizer*"))
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 300, size=(3, 33)))
    outs = {}
    for name, folder in (("bare", bare), ("full", tiny_dir)):
        outs[name] = tmp_path / f"{name}.npz"
        args = ["scan", str(folder), "--len", "32", "--samples", "2", "--data", str(tmp_path / "ids.npy")]
        assert main([*args, "--out", str(outs[name]), "--quiet"]) == 0
    bare_result, full_result = ScanResult.load(outs["bare"]), ScanResult.load(outs["full"])
    np.testing.assert_array_equal(bare_result.entropy, full_result.entropy)
    np.testing.assert_array_equal(bare_result.loss, full_result.loss)
    capsys.readouterr()
    text = ["scan", str(bare), "--len", "32", "--samples", "2", "--data", "austen:northanger", "--quiet"]
    assert main([*text, "--out", str(tmp_path / "text.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load a tokenizer" in err[0] and "save_pretrained" in err[0]
