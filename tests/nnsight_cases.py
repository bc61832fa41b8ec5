"""nnsight's `trace` and `generate` inside a recorder (the generation guide's "With other tools"): they run
the model's own forward, so EntropyRecorder and GenerationRecorder entered around them record what they
run, equal to the same forwards without nnsight, while nnsight's saves work as without the recorder; the
guide's nnsight block runs as written. In a process of its own (tests/generation/test_nnsight.py):
importing nnsight patches torch.Tensor.backward for the whole process."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from entropy_lens import EntropyRecorder, GenerationRecorder, load_model

nnsight = pytest.importorskip("nnsight", reason="no nnsight (the extra `nnsight`; `make` installs it)")


@pytest.fixture(scope="module")
def tiny():
    loaded = load_model("tiny-nope", dtype="float32")
    ids = loaded.tokenizer("It is a truth universally acknowledged", return_tensors="pt")["input_ids"]
    return loaded.model, loaded.tokenizer, ids


def test_a_trace_records_the_forward_it_runs(tiny):
    model, tok, ids = tiny
    traced = nnsight.TransformersModel(model, task="text-generation", tokenizer=tok)
    with EntropyRecorder(model, fused="off") as inside:  # noqa: SIM117 - nnsight reads its own block's source
        with traced.trace(ids):
            hidden = traced.model.layers[-1].output.save()
    with EntropyRecorder(model, fused="off") as plain, torch.no_grad():
        want = model(ids, output_hidden_states=True).hidden_states[-1]
    np.testing.assert_allclose(inside.entropy, plain.entropy, atol=1e-6)
    got = hidden[0] if isinstance(hidden, tuple) else hidden
    assert got.shape[:2] == want.shape[:2]  # nnsight's save works beside the recorder


def test_a_generation_records_every_token_nnsight_writes(tiny):
    model, tok, ids = tiny
    traced = nnsight.TransformersModel(model, task="text-generation", tokenizer=tok)
    with GenerationRecorder(model, stats=("entropy", "max_prob"), fused="off") as rec:  # noqa: SIM117
        with traced.generate(ids, max_new_tokens=6, do_sample=False) as tracer:
            written = tracer.result.save()
    with GenerationRecorder(model, stats=("entropy", "max_prob"), fused="off") as plain:
        model.generate(ids, max_new_tokens=6, do_sample=False)
    got, want = rec.result(), plain.result()
    assert got.tokens[0].tolist() == written[0, ids.shape[1] :].tolist() == want.tokens[0].tolist()
    for name in ("entropy", "max_prob"):
        np.testing.assert_allclose(got.stat(name), want.stat(name), atol=1e-6)


def test_the_guides_block_runs_as_written(tmp_path, monkeypatch):
    """The guide's first block (the model, the tokenizer) then its nnsight block, each from a file of its
    own (nnsight's tracer reads the calling code's source)."""
    page = (Path(__file__).parents[1] / "docs" / "guides" / "generation.md").read_text(encoding="utf-8")
    first = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)[0]
    (block,) = re.findall(r"```py\n(.*?)```", page, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, code in enumerate((first, block)):
        source = tmp_path / f"generation_md_{i}.py"
        source.write_text(code, encoding="utf-8")
        exec(compile(code, str(source), "exec"), namespace)  # noqa: S102 - the page's own code
    written, alongside = namespace["written"], namespace["alongside"]
    assert alongside.tokens[0].tolist() == written[0, namespace["ids"].shape[1] :].tolist()
