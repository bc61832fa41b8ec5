"""End to end: `scan` on tiny models and the bundled SmolLM2; the results file; resume; bad input."""

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from tiny import make_tiny_dir
from tolerances import sum_tolerance

from entropy_lens.cli import main
from entropy_lens.data import token_chunks
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import native_available, native_status
from entropy_lens.models import load_model
from entropy_lens.results import ScanResult
from entropy_lens.runs.scan import ScanConfig, partial_path, scan

DATA = "austen:northanger"


def _config(tiny_dir, **kw):
    return ScanConfig(**{"model": str(tiny_dir), "length": 48, "samples": 3, "data": DATA, **kw})


def _eager_reference(model_dir, config, multipliers=None):
    """Entropy and loss averaged over the same chunks, from eager probabilities and full logits."""
    lm = load_model(model_dir, nope=config.nope)
    model = lm.model
    if multipliers is not None:  # λ_h = m_h/√d via q_proj rows (an independent construction)
        d = lm.head_dim
        with torch.no_grad():
            for layer, blk in enumerate(model.model.layers):
                m = torch.as_tensor(multipliers[layer], dtype=torch.float32).repeat_interleave(d)
                blk.self_attn.q_proj.weight.mul_(m.unsqueeze(1))
    model.set_attn_implementation("eager")
    ids = torch.from_numpy(
        token_chunks(
            lm.tokenizer, config.data, length=config.length, samples=config.samples, seed=config.seed
        ).ids
    )
    with torch.no_grad():
        out = model(ids[:, :-1], output_attentions=True)
    ent = torch.stack([torch.special.entr(a.double()).sum(-1) for a in out.attentions], 1)  # (B, L, H, T)
    loss = torch.nn.functional.cross_entropy(out.logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return ent.mean(0).numpy(), loss.double().mean(0).numpy()


def test_scan_matches_eager_and_writes_a_plain_npz(tiny_dir, tmp_path):
    config = _config(tiny_dir)
    out = tmp_path / "r.npz"
    result = scan(config, out=out, progress=False)
    ent, loss = _eager_reference(str(tiny_dir), config)
    np.testing.assert_allclose(result.entropy, ent, atol=1e-5)
    np.testing.assert_allclose(result.loss, loss, atol=1e-5)
    # numpy alone opens it; the documented arrays and meta are there
    with np.load(out) as z:
        assert z["entropy"].dtype == np.float32 and z["entropy"].shape == (2, 4, 48)
        assert z["loss"].shape == (48,) and z["count"].tolist() == [3] * 48
        meta = json.loads(str(z["meta"]))
    from entropy_lens.results.schema import REQUIRED_META

    assert set(REQUIRED_META) <= set(meta), set(REQUIRED_META) - set(meta)
    # "auto" on CPU tried both ways on the first layers (capture/fused.py) and names what ran
    cpu_fused = "native" if native_available() else "torch-streamed"  # the CPU fused pass
    backends = {"torch_chunked", "native" if cpu_fused == "native" else "torch_chunked"}
    assert meta["scales"] == [[1.0] * 4] * 2 and meta["head_dim"] == 16
    assert meta["backend"] == "+".join(sorted(backends))
    assert (
        meta["attention_path"] == "+".join(sorted({"sdpa-then-entropy", cpu_fused}))
        and meta["scan_config"]["fused"] == "auto"
    )
    assert meta["native"] == native_status()
    assert meta["fold"] == "eager"
    assert meta["length"] == 48 and meta["samples"] == 3 and meta["data"] == DATA
    loaded = ScanResult.load(out)
    assert np.array_equal(loaded.entropy, result.entropy) and loaded.meta == meta
    assert np.all(loaded.entropy_std >= 0)


def test_a_sliding_window_model_folder_scans_like_its_eager_attention(tmp_path):
    from tiny import make_tiny_sliding_window_model, make_tokenizer

    folder = tmp_path / "tiny-swa"
    make_tiny_sliding_window_model(window=8).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    config = ScanConfig(model=str(folder), length=40, samples=2, data=DATA)
    result = scan(config, progress=False)
    ent, loss = _eager_reference(str(folder), config)
    np.testing.assert_allclose(result.entropy, ent, atol=1e-5)
    np.testing.assert_allclose(result.loss, loss, atol=1e-5)
    assert result.entropy[1].max() <= np.log(8) + 1e-6  # the sliding layer never sees more than 8 keys


def test_uniform_and_head_scales(tiny_dir, tmp_path):
    config = _config(tiny_dir, scale=1.5, samples=2)
    result = scan(config, progress=False)
    assert result.meta["scales"] == [[1.5] * 4] * 2 and result.meta["scale_source"] == "uniform"
    ent, loss = _eager_reference(str(tiny_dir), config, np.full((2, 4), 1.5))
    np.testing.assert_allclose(result.entropy, ent, atol=1e-5)
    np.testing.assert_allclose(result.loss, loss, atol=1e-5)

    hs = np.array([[1.0, 2.0, 0.5, 1.25], [3.0, 1.0, 1.5, 0.75]])
    f = tmp_path / "hs.npy"
    np.save(f, hs)
    result = scan(_config(tiny_dir, head_scales=str(f), samples=2), progress=False)
    assert result.meta["scales"] == hs.tolist()
    ent, _ = _eager_reference(str(tiny_dir), _config(tiny_dir, samples=2), hs)
    np.testing.assert_allclose(result.entropy, ent, atol=1e-5)


def test_checkpoint_scale_param_is_applied(tmp_path):
    hs = torch.tensor([[1.0, 2.0, 1.5, 1.0], [1.2, 1.0, 2.5, 1.0]])
    folder = make_tiny_dir(
        tmp_path / "hs-model",
        extra_tensors={f"model.layers.{i}.self_attn.scale_param": hs[i] for i in range(2)},
    )
    config = ScanConfig(model=str(folder), length=32, samples=2, data=DATA)
    result = scan(config, progress=False)
    assert result.meta["scale_source"] == "checkpoint"
    np.testing.assert_allclose(result.meta["scales"], hs.numpy())
    ent, _ = _eager_reference(str(folder), config, hs.numpy())
    np.testing.assert_allclose(result.entropy, ent, atol=1e-5)


def test_nope_and_train_len_recorded(tiny_dir):
    result = scan(_config(tiny_dir, nope=True, train_len=24, samples=1), progress=False)
    assert result.meta["nope"] is True and result.meta["train_len"] == 24
    ent, _ = _eager_reference(str(tiny_dir), _config(tiny_dir, nope=True, samples=1))
    np.testing.assert_allclose(result.entropy, ent, atol=1e-5)


def test_batch_size_does_not_change_the_result(tiny_dir):
    a = scan(_config(tiny_dir, samples=4), progress=False)
    b = scan(_config(tiny_dir, samples=4, batch_size=3), progress=False)
    # other batch shapes, other float32 GEMMs: the entropy's sums over 48 keys and D, the loss's over
    # the hidden size and the vocabulary
    config = json.loads((tiny_dir / "config.json").read_text(encoding="utf-8"))
    tol = sum_tolerance(48 + config["hidden_size"] + config["vocab_size"])
    np.testing.assert_allclose(a.entropy, b.entropy, rtol=tol, atol=tol)
    np.testing.assert_allclose(a.loss, b.loss, rtol=tol, atol=tol)


def test_a_cpu_scan_returns_the_free_heap_after_each_layer_and_before_the_loss(tiny_dir, monkeypatch):
    import entropy_lens.runs.scan as scan_module
    from entropy_lens.runs import batches, memory

    calls, nll = [], batches.next_token_nll
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append("layer"))
    monkeypatch.setattr(scan_module, "release_free_heap", lambda: calls.append("release"))
    monkeypatch.setattr(batches, "release_free_heap", lambda: calls.append("release"))
    monkeypatch.setattr(batches, "next_token_nll", lambda *a, **k: calls.append("loss") or nll(*a, **k))
    monkeypatch.setattr(scan_module, "large_blocks_returned", lambda: calls.append("threshold"))
    scan(_config(tiny_dir, samples=4, batch_size=3), progress=False)
    # once after loading and tokenising (and the mmap threshold fixed), then the tiny model's 2 layers
    # and the loss of each of 2 batches
    assert calls == ["release", "threshold"] + (["layer"] * 2 + ["release", "loss"]) * 2


@pytest.mark.parametrize("stats", ["entropy", "max_prob,varentropy"])
def test_resume_after_interrupt_is_identical(tiny_dir, tmp_path, monkeypatch, stats):
    from entropy_lens.capture.fused import PathChoices

    config = _config(tiny_dir, samples=5, stats=stats)

    from entropy_lens.runs import batches

    real, calls = batches.next_token_nll, {"n": 0}

    def flaky(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(*args, **kw)

    out = tmp_path / "r.npz"
    monkeypatch.setattr(batches, "next_token_nll", flaky)
    with pytest.raises(KeyboardInterrupt):
        scan(config, out=out, progress=False, checkpoint_every_s=1e9)
    assert not out.exists() and partial_path(out).exists()  # only the checkpoint, never a half result
    monkeypatch.setattr(batches, "next_token_nll", real)
    resumed = scan(config, out=out, resume=True, progress=False)
    assert calls["n"] == 4  # the 3 finished samples were not recomputed
    # uninterrupted, with the paths "auto" chose (the trials of the first layers use both)
    full = scan(config, progress=False, choices=PathChoices(replay=resumed.meta.get("fused_choices")))
    for name in ("entropy", "entropy_sq", "loss", "loss_sq", "count"):
        assert np.array_equal(getattr(resumed, name), getattr(full, name)), name
    beyond = set() if stats == "entropy" else {"max_prob", "max_prob_sq", "varentropy", "varentropy_sq"}
    assert resumed.stats.keys() == full.stats.keys() == beyond
    assert all(
        np.array_equal(resumed.stats[k], full.stats[k]) for k in full.stats
    )  # the checkpoint kept them
    assert out.exists() and not partial_path(out).exists()
    # resuming a finished scan returns it; a different scan under the same name is refused
    assert np.array_equal(scan(config, out=out, resume=True, progress=False).entropy, full.entropy)
    assert (
        main(
            [
                "scan",
                str(tiny_dir),
                "--len",
                "48",
                "--samples",
                "2",
                "--data",
                DATA,
                "--out",
                str(out),
                "--resume",
                "--quiet",
            ]
        )
        == 2
    )


def test_partial_of_another_scan_is_refused(tiny_dir, tmp_path, monkeypatch):
    from entropy_lens.runs import batches

    out = tmp_path / "r.npz"
    real = batches.next_token_nll
    calls = {"n": 0}

    def second_fails(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(batches, "next_token_nll", second_fails)
    with pytest.raises(KeyboardInterrupt):
        scan(_config(tiny_dir), out=out, progress=False)
    monkeypatch.setattr(batches, "next_token_nll", real)
    with pytest.raises(EntropyLensError, match="checkpoint of an unfinished scan with other flags"):
        scan(_config(tiny_dir, seed=1), out=out, resume=True, progress=False)


# ---- the command line --------------------------------------------------------------------------


def test_cli_scan_prints_summary(tiny_dir, tmp_path, capsys):
    out = tmp_path / "cli.npz"
    assert (
        main(
            [
                "scan",
                str(tiny_dir),
                "--len",
                "40",
                "--samples",
                "2",
                "--data",
                DATA,
                "--out",
                str(out),
                "--quiet",
                "--scale",
                "1.2",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "first" in text and "middle" in text and "last" in text and str(out) in text
    assert ScanResult.load(out).meta["scales"][0][0] == 1.2


@pytest.mark.full
@pytest.mark.slow
def test_python_dash_m_works(tiny_dir, tmp_path):
    """`python -m entropy_lens scan` in a new process writes its result. Under `make test` the same holds
    in the processes of other tests, each a `python -m entropy_lens scan` that writes a result they read:
    tests/runs/test_reliability.py's test_interrupted_scan_resumes_on_a_plain_rerun_bit_for_bit and
    tests/runs/test_reliability_runs.py's SIGTERM test (the rerun)."""
    out = tmp_path / "m.npz"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "entropy_lens",
            "scan",
            str(tiny_dir),
            "--len",
            "32",
            "--samples",
            "1",
            "--data",
            DATA,
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert ScanResult.load(out).length == 32


def _bad_inputs(tiny_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    for f in tiny_dir.iterdir():
        data = f.read_bytes()
        (trunc / f.name).write_bytes(data[: len(data) // 2] if f.suffix == ".safetensors" else data)
    from transformers import BertConfig, BertModel

    bert = tmp_path / "bert"
    BertModel(
        BertConfig(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100
        )
    ).save_pretrained(bert)
    np.save(tmp_path / "wrong.npy", np.ones((3, 4)))
    np.save(tmp_path / "neg.npy", -np.ones((2, 4)))
    np.save(tmp_path / "nan.npy", np.full((2, 4), np.nan))
    (tmp_path / "existing.npz").write_bytes(b"old")
    t = str(tiny_dir)
    return {
        "missing path": (["scan", str(tmp_path / "nope"), "--len", "16"], "not found"),
        "folder without config": (["scan", str(tmp_path / "empty"), "--len", "16"], "config.json"),
        "corrupt safetensors": (["scan", str(trunc), "--len", "16"], "safetensors"),
        "not a causal LM": (["scan", str(bert), "--len", "16"], "causal"),
        "len < 2": (["scan", t, "--len", "1"], "--len"),
        "len beyond corpus": (["scan", t, "--len", "100000000", "--data", DATA], "--len"),
        "too many samples": (["scan", t, "--len", "40000", "--samples", "500", "--data", DATA], "samples"),
        "head scales shape": (
            ["scan", t, "--len", "16", "--head-scales", str(tmp_path / "wrong.npy")],
            "shape",
        ),
        "head scales negative": (
            ["scan", t, "--len", "16", "--head-scales", str(tmp_path / "neg.npy")],
            "must be positive",
        ),
        "head scales NaN": (
            ["scan", t, "--len", "16", "--head-scales", str(tmp_path / "nan.npy")],
            "NaN|finite",
        ),
        "head scales missing": (
            ["scan", t, "--len", "16", "--head-scales", str(tmp_path / "no.npy")],
            "exist",
        ),
        "bad scale": (["scan", t, "--len", "16", "--scale", "-1"], "--scale"),
        "unknown dtype": (["scan", t, "--len", "16", "--dtype", "float7"], "dtype"),
        "unknown device": (["scan", t, "--len", "16", "--device", "tpu9"], "device"),
        "cuda without gpu": (["scan", t, "--len", "16", "--device", "cuda"], "CUDA"),
        "unknown backend": (["scan", t, "--len", "16", "--backend", "magic"], "backend"),
        "existing out": (["scan", t, "--len", "16", "--out", str(tmp_path / "existing.npz")], "--force"),
        "missing data": (["scan", t, "--len", "16", "--data", str(tmp_path / "no.txt")], "data|found|exist"),
    }


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_bad_input_exits_2_with_one_line_and_no_file(tiny_dir, tmp_path, capsys):
    cases = _bad_inputs(tiny_dir, tmp_path)
    capsys.readouterr()
    for name, (argv, pattern) in cases.items():
        out = tmp_path / f"out-{name.replace(' ', '_')}.npz"
        if "--out" not in argv:
            argv = [*argv, "--out", str(out), "--quiet"]
        code = main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2, f"{name}: exit {code}"
        assert err.startswith("entropy-lens: error:") and len(err.splitlines()) == 1, f"{name}: {err!r}"
        assert re.search(pattern, err), f"{name}: {err!r}"
        assert not out.exists() and not partial_path(out).exists(), name
    assert (tmp_path / "existing.npz").read_bytes() == b"old"  # untouched


def test_truncated_results_file_is_rejected(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(EntropyLensError, match="not a readable results file"):
        ScanResult.load(bad)


# ---- the real bundled model ----------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_entropy_matches_its_eager_probabilities(monkeypatch):
    """The real model at 320 tokens. Eager fp32 probabilities carry their own rounding (about 5e-6
    here), so the comparison with them allows 2e-5; the kernel itself is held to 1e-5 against a
    float64 computation on the very q and k the model produced."""
    import entropy_lens.capture.paths as paths_mod
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.kernels import run

    seen = []

    def spy(kernel, q, k, v, softmax_scale, mods, **kw):  # every kernel call of the separate pass
        if v is None:
            seen.append(run("reference", q, k, None, softmax_scale, mods)["entropy"][0].numpy())
        return run(kernel, q, k, v, softmax_scale, mods, **kw)

    monkeypatch.setattr(paths_mod, "run", spy)
    lm = load_model("smollm2")
    ids = torch.from_numpy(token_chunks(lm.tokenizer, "austen", length=320, samples=1, seed=3).ids[:, :-1])
    model = lm.model
    with torch.no_grad():
        plain = model(ids).logits
        with EntropyRecorder(model, fused="off") as rec:
            hooked = model(ids).logits
        with EntropyRecorder(model, fused="on") as fused:  # the CPU fused pass: output from its tiles
            fused_logits = model(ids).logits
        model.set_attn_implementation("eager")
        att = model(ids, output_attentions=True).attentions
        model.set_attn_implementation("sdpa")
    assert torch.equal(hooked, plain)
    torch.testing.assert_close(fused_logits, plain, atol=1e-4, rtol=1e-5)
    assert rec.entropy.shape == (30, 9, 320) and len(seen) == 30
    for layer, a in enumerate(att):
        np.testing.assert_allclose(rec.entropy[layer], seen[layer], atol=1e-5)
        eager = torch.special.entr(a.double()).sum(-1)[0].numpy()
        np.testing.assert_allclose(rec.entropy[layer], eager, atol=2e-5)
        np.testing.assert_allclose(fused.entropy[layer], eager, atol=2e-5)


@pytest.mark.slow  # a fresh interpreter: the import order is the point
def test_top_level_scan_is_the_function_whatever_was_imported_first():
    import subprocess
    import sys

    code = (
        "import entropy_lens.figures.pipeline, entropy_lens.runs.sweep\n"
        "from entropy_lens import ScanConfig, scan\n"
        "assert callable(scan) and scan.__module__ == 'entropy_lens.runs.scan', scan\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_ctrl_c_while_the_sums_are_updated_waits_for_the_update():
    import os
    import signal

    from entropy_lens.runs.sums import interrupts_deferred

    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the signal arrives here and is held
        done.append(True)
    assert done == [True] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
