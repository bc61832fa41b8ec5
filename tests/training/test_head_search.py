"""Head-scale search on a tiny random model: gradients reach the multipliers, the clamp holds, the
output is readable by `scan --head-scales`, the chunked loss equals the plain one, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tolerances import sum_tolerance

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.models import load_model
from entropy_lens.runs.scan import ScanConfig, scan
from entropy_lens.training.head_search import HeadSearchConfig, mean_nll, save_head_scales, search_head_scales

DATA = "austen:persuasion"


def test_chunked_loss_equals_plain_cross_entropy(tiny_dir):
    model = load_model(str(tiny_dir)).model
    ids = torch.randint(0, model.config.vocab_size, (2, 33))
    hidden = model.get_decoder()(input_ids=ids[:, :-1]).last_hidden_state
    plain = torch.nn.functional.cross_entropy(model.lm_head(hidden).flatten(0, 1), ids[:, 1:].flatten())
    # float32 logits of other shapes, a log-sum-exp over the vocabulary and a mean over the 2 x 32 tokens
    tol = sum_tolerance(model.config.hidden_size + model.config.vocab_size + 64)
    for chunk in (1, 7, 32, 100):
        torch.testing.assert_close(mean_nll(model, hidden, ids[:, 1:], chunk), plain, rtol=tol, atol=tol)


def test_search_moves_scales_and_clamp_holds(tiny_dir):
    config = HeadSearchConfig(model=str(tiny_dir), length=32, init=1.0, steps=4, lr=0.5, batch=2, data=DATA)
    result = search_head_scales(config, progress=False)
    assert result.scales.shape == (2, 4) and np.all(result.scales >= 1.0)
    assert not np.allclose(result.scales, 1.0)  # gradients reached the multipliers
    assert [r["step"] for r in result.log] == [1, 2, 3, 4] and all(np.isfinite(r["loss"]) for r in result.log)
    free = search_head_scales(HeadSearchConfig(**{**config.__dict__, "lower_bound": 0.0}), progress=False)
    assert free.scales.min() < 1.0  # without the focus constraint some heads drop below 1/sqrt(d)


def test_micro_batches_and_checkpointing_give_the_same_search(tiny_dir):
    base = HeadSearchConfig(
        model=str(tiny_dir), length=24, init=1.2, steps=2, lr=0.2, batch=4, data=DATA, chunk=5
    )
    a = search_head_scales(base, progress=False)
    b = search_head_scales(
        HeadSearchConfig(**{**base.__dict__, "micro_batch": 2, "checkpointing": True}), progress=False
    )
    np.testing.assert_allclose(a.scales, b.scales, rtol=1e-5)


def test_saved_scales_load_in_scan(tiny_dir, tmp_path):
    config = HeadSearchConfig(model=str(tiny_dir), length=32, init=1.3, steps=2, batch=2, data=DATA)
    result = search_head_scales(config, progress=False)
    out = save_head_scales(result, tmp_path / "hs.safetensors")
    table = json.loads((tmp_path / "hs.safetensors.json").read_text())
    np.testing.assert_allclose(table["scales"], result.scales)
    r = scan(
        ScanConfig(model=str(tiny_dir), length=16, samples=1, data=DATA, head_scales=str(out)), progress=False
    )
    np.testing.assert_allclose(r.meta["scales"], result.scales, rtol=1e-6)  # stored as float32


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"init": 0.5}, "lower-bound"),
        ({"batch": 3, "micro_batch": 2}, "multiple"),
        ({"steps": 0}, "--steps"),
        ({"lr": -1.0}, "--lr"),
        ({"lower_bound": -1.0, "init": 1.0}, "--lower-bound"),
        ({"length": 1}, "--len"),
    ],
)
def test_bad_search_settings(tiny_dir, overrides, match):
    fields = {"model": str(tiny_dir), "length": 32, "data": DATA, **overrides}
    with pytest.raises(EntropyLensError, match=match):
        search_head_scales(HeadSearchConfig(**fields), progress=False)


def test_cli_search_heads(tiny_dir, tmp_path, capsys):
    args = [
        "search-heads",
        str(tiny_dir),
        "--len",
        "16",
        "--steps",
        "2",
        "--batch",
        "2",
        "--data",
        DATA,
        "--quiet",
    ]
    assert main([*args, "--out", str(tmp_path / "hs.npy")]) == 2
    assert ".safetensors" in capsys.readouterr().err
    assert main([*args, "--init", "1.2", "--out", str(tmp_path / "hs.safetensors")]) == 0
    assert "head scales" in capsys.readouterr().out and (tmp_path / "hs.safetensors.json").is_file()


@pytest.mark.slow
def test_the_saved_file_has_the_same_bytes_every_time(tmp_path):
    """The figures' cache names scans by the bytes of their head-scale file: equal scales, equal bytes."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from entropy_lens.training.head_search import HeadSearchConfig, HeadSearchResult, save_head_scales\n"
        "r = HeadSearchResult(np.full((2, 3), 1.25), [], HeadSearchConfig(model='x', length=4), 1.0)\n"
        "save_head_scales(r, sys.argv[1])\n"
    )
    import os

    files = [tmp_path / f"{i}.safetensors" for i in range(3)]
    # separate processes, started together: hash-map order may differ between them, not within one (each
    # its own PYTHONHASHSEED, so their string hashes surely differ)
    runs = [
        subprocess.Popen([sys.executable, "-c", code, str(f)], env={**os.environ, "PYTHONHASHSEED": str(i)})
        for i, f in enumerate(files)
    ]
    assert [run.wait(timeout=300) for run in runs] == [0, 0, 0]
    assert len({f.read_bytes() for f in files}) == 1


@pytest.mark.slow
def test_the_search_takes_the_loading_flags_and_a_schedule(tiny_dir, tmp_path):
    """--nope and the other loading flags reach the search (a NoPE-named RoPE-config folder needs one,
    as everywhere), and under --scale-schedule the λ(h) are learnt on top of its m(i): another search.
    Each of them is in the search's cache key (what changes its numbers)."""
    import dataclasses
    import shutil

    folder = tmp_path / "Tiny-NoPE"
    shutil.copytree(tiny_dir, folder)
    base = HeadSearchConfig(
        model=str(folder), length=24, steps=3, batch=2, data="austen:persuasion", init=1.2
    )
    with pytest.raises(EntropyLensError, match="pass --nope .* or --no-nope"):
        search_head_scales(base, progress=False)
    plain = search_head_scales(dataclasses.replace(base, nope=True), progress=False).scales
    scheduled = dataclasses.replace(base, nope=True, scale_schedule="log:0.8", train_len=8)
    assert not np.allclose(search_head_scales(scheduled, progress=False).scales, plain)
    for changed in ({"nope": True}, {"scale_schedule": "log:0.8"}, {"train_len": 8}, {"revision": "v1"}):
        assert dataclasses.replace(base, **changed).cache_key() != base.cache_key(), changed
    with pytest.raises(EntropyLensError, match="scale-schedule"):
        dataclasses.replace(base, scale_schedule="cosine:1").check()
