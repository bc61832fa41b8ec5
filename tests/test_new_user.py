"""What a new user tripped over (issue 51): SmolLM2's training length read from its GGUF, a misspelt
recorder keyword named in one line, figures whose legends carry what their captions used to."""

from __future__ import annotations

import struct
from pathlib import Path

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
