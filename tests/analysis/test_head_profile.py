"""analysis.head_profile: each KV head's attention split into sink, local window and distant keys from a
scan's first_mass and recent_mass, its table and DuoAttention's pattern folder (config.json and
full_attention_heads.tsv, as kvpress's DuoAttentionPress reads them)."""

import json

import numpy as np
import pytest

from entropy_lens.analysis import head_profile
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult

L_, H, T = 2, 4, 40


def result(first, recent, *, sink=None, kv_heads=2, first_keys=2, recent_keys=8, reduction="heads"):
    """A ScanResult whose first_mass and recent_mass are `first` and `recent` (layers, heads) at every
    position."""
    shape = (L_, H, T)
    stats = {
        "first_mass": np.broadcast_to(np.asarray(first, np.float32)[..., None], shape).copy(),
        "recent_mass": np.broadcast_to(np.asarray(recent, np.float32)[..., None], shape).copy(),
    }
    if sink is not None:
        stats["sink_mass"] = np.full(shape, sink, np.float32)
    meta = {
        "schema_version": 2,
        "entropy_lens_version": "0",
        "git_hash": "x",
        "model": "m",
        "config_hash": "h",
        "nope": True,
        "head_dim": 8,
        "scales": [[1.0] * H] * L_,
        "data": "d",
        "seed": 0,
        "samples": 1,
        "length": T,
        "dtype": "float32",
        "device": "cpu",
        "backend": "torch_chunked",
        "wall_time_s": 1.0,
        "n_kv_heads": kv_heads,
        "first_keys": first_keys,
        "recent_keys": recent_keys,
        "entropy_reduction": reduction,
    }
    zeros = np.zeros(shape, np.float32)
    return ScanResult(
        zeros,
        zeros,
        np.zeros(T, np.float32),
        np.zeros(T, np.float32),
        np.ones(T, np.int64),
        meta=meta,
        stats=stats,
    )


def test_the_distant_mass_is_what_sink_and_window_leave_per_kv_head(tmp_path):
    first = [[0.5, 0.3, 0.1, 0.1], [0.2, 0.2, 0.0, 0.0]]
    recent = [[0.4, 0.5, 0.2, 0.0], [0.1, 0.1, 0.5, 0.5]]
    profile = head_profile(result(first, recent, sink=0.05))
    distant = 1 - np.asarray(first) - np.asarray(recent) - 0.05
    np.testing.assert_allclose(profile.distant, distant.reshape(L_, 2, 2).mean(-1), atol=1e-6)
    assert (profile.sink_size, profile.recent_size, profile.positions) == (2, 8, (9, T))
    folder = profile.export(tmp_path / "pattern")
    assert json.loads((folder / "config.json").read_text()) == {"sink_size": 2, "recent_size": 8}
    heads = np.loadtxt(folder / "full_attention_heads.tsv", delimiter="\t")  # as kvpress reads it
    np.testing.assert_allclose(heads, profile.distant.clip(0, 1), atol=1e-6)
    assert heads.shape == (L_, 2) and "kv 1" in profile.table()


def test_what_a_profile_needs_is_refused_in_one_line():
    with pytest.raises(EntropyLensError, match="--stats first_mass,recent_mass --record heads"):
        head_profile(result([[0.1] * H] * L_, [[0.1] * H] * L_, reduction="mean"))
    with pytest.raises(EntropyLensError, match="no distant keys"):
        head_profile(result([[0.1] * H] * L_, [[0.1] * H] * L_, recent_keys=40))


@pytest.mark.slow  # a scan (torch, transformers) in a folder of torch-free tests
def test_a_scan_tells_streaming_heads_from_retrieval_heads(tmp_path):
    """A tiny Llama whose first KV head's queries copy their keys (each token attends itself: its local
    window holds its attention, a streaming head) and whose second KV head's queries are zero (uniform
    attention over every key: mostly distant, a retrieval-like head): the scan's profile and its export
    rank them apart in every layer."""
    import torch
    from tiny import make_tiny_dir
    from transformers import AutoModelForCausalLM

    from entropy_lens.runs.scan import ScanConfig, scan

    folder = make_tiny_dir(tmp_path / "known")
    model = AutoModelForCausalLM.from_pretrained(folder)
    d = model.config.head_dim
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            attn.q_proj.weight[: 2 * d] = 8.0 * attn.k_proj.weight[:d].repeat(2, 1)  # KV head 0's two heads
            attn.q_proj.weight[2 * d :] = 0.0  # KV head 1's: uniform
    model.save_pretrained(folder)
    config = ScanConfig(
        model=str(folder),
        length=96,
        samples=2,
        data="austen:persuasion",
        stats="first_mass,recent_mass",
        first_keys=2,
        recent_keys=8,
    )
    profile = head_profile(scan(config, progress=False), sink=2, recent=8)
    assert profile.distant.shape == (2, 2) and (profile.distant[:, 0] < 0.2).all()
    assert (profile.distant[:, 1] > 0.6).all()  # uniform rows at 9..95: most keys are distant
    heads = np.loadtxt(profile.export(tmp_path / "pattern") / "full_attention_heads.tsv", delimiter="\t")
    assert (heads[:, 1] > heads[:, 0]).all()
    with pytest.raises(EntropyLensError, match="--first-keys 4 --recent-keys 8"):
        head_profile(scan(config, progress=False), sink=4)


# ---- issue 65: the export never replaces a foreign file (item 5), nor traces back (item 7) --------------


def _profile():
    return head_profile(result([[0.2] * H] * L_, [[0.3] * H] * L_))


def test_the_export_never_writes_through_a_link_nor_over_a_foreign_file(tmp_path):
    """main followed a symlinked folder/config.json and overwrote an unrelated file."""
    precious = tmp_path / "precious.json"
    precious.write_text('{"mine": 1}', encoding="utf-8")
    folder = tmp_path / "pattern"
    folder.mkdir()
    (folder / "config.json").symlink_to(precious)
    with pytest.raises(EntropyLensError, match=r"config.json is a link to .*precious.json .* is kept") as err:
        _profile().export(folder)
    assert "\n" not in str(err.value) and precious.read_text(encoding="utf-8") == '{"mine": 1}'
    (folder / "config.json").unlink()
    for name, text in (
        ("config.json", '{"sink_size": 2, "recent_size": 8, "x": 1}'),
        ("full_attention_heads.tsv", "notes\n"),
    ):
        (folder / name).write_text(text, encoding="utf-8")
        with pytest.raises(
            EntropyLensError, match=rf"{name} is not a pattern file this export wrote, and is kept"
        ):
            _profile().export(folder)
        assert (folder / name).read_text(encoding="utf-8") == text
        (folder / name).unlink()
    assert not list(folder.iterdir())  # every check before any write: nothing half-written


def test_the_export_replaces_its_own_files(tmp_path):
    folder = _profile().export(tmp_path / "pattern")
    again = head_profile(result([[0.1] * H] * L_, [[0.1] * H] * L_)).export(folder)
    heads = np.loadtxt(again / "full_attention_heads.tsv", delimiter="\t")
    np.testing.assert_allclose(heads, np.full((L_, 2), 0.8), atol=1e-6)


def test_the_export_refuses_what_is_no_folder_in_one_line(tmp_path):
    import os

    file = tmp_path / "file"
    file.write_text("x", encoding="utf-8")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = {
        str(file): r"is a file, not a folder",
        str(fifo): r"is a (FIFO|named pipe).*, not a folder",
        "/dev/null": r"is a character device, not a folder",
        "": r"is empty",
        "/proc/self/x": r"cannot make the folder /proc/self/x|could not write",
    }
    for folder, message in cases.items():
        with pytest.raises(EntropyLensError, match=message) as err:
            _profile().export(folder)
        assert "\n" not in str(err.value), folder
    assert file.read_text(encoding="utf-8") == "x"


@pytest.mark.parametrize("sink", [-1, 0, True, 2.0])
def test_a_sink_or_window_outside_the_flags_range_is_refused_not_suggested(sink):
    """main suggested `--first-keys -1`, which the CLI refuses, and took sink=True."""
    with pytest.raises(EntropyLensError, match=r"^sink must be") as err:
        head_profile(result([[0.2] * H] * L_, [[0.3] * H] * L_), sink=sink)
    assert "--first-keys -1" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EntropyLensError, match=r"^recent must be"):
        head_profile(result([[0.2] * H] * L_, [[0.3] * H] * L_), recent=sink)
