"""Every causal-LM architecture of the installed transformers: exact entropy, or a clear refusal.

Each architecture is built from its config with random weights (initializer_range 0.5, so attention is
far from uniform), in float32 (transformers' eager attention gives NaN rows for left padding in
float64). The recorder's entropy must equal the float64 entropy of the model's own eager
`output_attentions` probabilities (a sink, where the model has one, counted as one more outcome: its
mass is what the eager probabilities leave of 1) within 1e-5 nats, and the logits under the capture
must equal eager's within 1e-4, with no padding, left padding and right padding. The same list goes
through `scan` (files). Architectures whose attention does not run through transformers' attention
interface are refused in one line, and nothing is written.

`python tests/capture/test_architectures.py` prints the table of supported architectures of
docs/guides/architectures.md from the lists in tests/architectures.py; a test holds the page to it.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from architectures import (
    COMMON,
    EAGER_ONLY,
    SUPPORTED,
    build,
    eager,
    eager_probabilities,
    ids_and_mask,
    mean_by_position,
    save_folder,
)
from capture_cases import RowsTo

PADDING = ("none", "left", "right")


@pytest.mark.parametrize("fused", ["off", "on", "on-torch"])
@pytest.mark.parametrize("padding", PADDING)
@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_entropy_and_logits_equal_eager(model_type, padding, fused, monkeypatch):
    """fused "on": the layer output comes from the CPU fused pass too, the native kernel (skipped
    where it cannot build); "on-torch": the same with the native kernel off, the streamed torch path."""
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.kernels import native_available, native_status

    if fused == "on-torch":
        monkeypatch.setenv("ENTROPY_LENS_NATIVE", "0")
    elif fused == "on" and not native_available():
        pytest.skip(f"the native kernel is {native_status()}")
    fused = fused.removesuffix("-torch")
    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask(padding)
    logits, entropies = eager(model, ids, mask)
    with EntropyRecorder(model, fused=fused) as rec, torch.no_grad():
        captured = model(ids, attention_mask=mask).logits
    if fused == "on":  # what ran: the CPU fused pass wherever the layer captured
        assert rec.session.paths == {"native" if native_available() else "torch-streamed"}
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    torch.testing.assert_close(captured[real], logits[real], atol=1e-4, rtol=0)
    expected = mean_by_position(entropies, mask)
    assert rec.entropy.shape == expected.shape
    np.testing.assert_allclose(rec.entropy, expected, atol=1e-5, rtol=0)
    assert expected.std() > 0.05, "attention near uniform: the case would not test much"
    assert not any("forward" in vars(m) for m in model.modules())  # routed layers restored on exit


ALIBI = ("bloom", "mpt")


def _scaled_queries(model, s: float):
    """A copy of an ALiBi `model` whose query projection is multiplied by s: its own eager attention
    then computes s·λ·q·k with the bias unchanged, what a uniform scale s means for ALiBi models."""
    import copy

    twin = copy.deepcopy(model)
    with torch.no_grad():
        for layer in twin.modules():
            if type(layer).__name__ == "MptAttention":
                layer.Wqkv.weight[: layer.hidden_size] *= s  # chunk(3): q, k, v
            elif type(layer).__name__ == "BloomAttention":
                rows = torch.arange(3 * layer.hidden_size).view(layer.num_heads, 3, layer.head_dim)[:, 0]
                layer.query_key_value.weight[rows.flatten()] *= s  # (heads, q/k/v, head_dim) interleaved
                layer.query_key_value.bias[rows.flatten()] *= s
    return twin


@pytest.mark.parametrize("model_type", ALIBI)
def test_alibi_scales_multiply_qk_not_the_bias(model_type):
    """Under --scale s (per-head λ(h), a --scale-schedule) an ALiBi model's scores are s·λ·q·k −
    slope·(i − j): equal to the model's own eager attention with its queries multiplied by s."""
    from entropy_lens.capture import EntropyRecorder

    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask("left")
    logits, entropies = eager(_scaled_queries(model, 1.7), ids, mask)
    heads = np.full((2, 6), 1.7)
    from entropy_lens.capture import Schedule

    beyond_first = {"schedule": Schedule("piecewise", 1.7, 1)}  # row 0 sees one key: its scale is moot
    for given in ({"scales": 1.7}, {"scales": heads}, beyond_first):
        with EntropyRecorder(model, **given) as rec, torch.no_grad():
            captured = model(ids, attention_mask=mask).logits
        # twice the usual tolerances: the twin's scaled weights are rounded to float32 themselves, and
        # layer 1 sees layer 0's output through that rounding
        real = mask.bool()
        torch.testing.assert_close(captured[real], logits[real], atol=2e-4, rtol=0)
        np.testing.assert_allclose(rec.entropy, mean_by_position(entropies, mask), atol=2e-5, rtol=0)


@pytest.mark.parametrize("model_type", ALIBI)
def test_trainable_scales_on_alibi_get_the_streamed_paths_loss_and_gradients(model_type):
    """A trainable multiplier on an ALiBi model runs sdpa with the bias as its mask (autograd): the same
    loss as the exact streamed path at those scales, and gradients."""
    from entropy_lens.capture import ScaleSession

    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask("right")
    mult = torch.nn.Parameter(torch.full((2, 6), 1.3))
    with ScaleSession(model, scales=mult) as session:
        loss = model(ids, attention_mask=mask).logits.float().logsumexp(-1)[mask.bool()].mean()
    loss.backward()
    assert session.session.paths == {"sdpa-alibi-mask"} and mult.grad.abs().sum() > 0
    with ScaleSession(model, scales=mult.detach()) as session, torch.no_grad():
        streamed = model(ids, attention_mask=mask).logits.float().logsumexp(-1)[mask.bool()].mean()
    assert session.session.paths == {"torch-streamed"}
    torch.testing.assert_close(loss.detach(), streamed, atol=1e-5, rtol=0)


def test_falcon_alibi_loaded_eager_is_refused_with_the_fix():
    from transformers import AutoModelForCausalLM

    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    config = build("falcon", {"alibi": True}).config
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with pytest.raises(EntropyLensError, match="adds the ALiBi bias twice"), EntropyRecorder(model):
        pytest.fail("the recorder must refuse before any forward")


def test_falcon_40b_layout_and_mpt_past_its_max_seq_len():
    """Falcon's new decoder architecture (grouped kv, broadcast to every head) equals eager; MPT beyond
    config.max_seq_len, where its own layer cannot add its position_bias (built at that length), equals
    the same weights with max_seq_len raised: the slopes do not depend on it."""
    from entropy_lens.capture import EntropyRecorder

    falcon = build("falcon", {"alibi": False, "new_decoder_architecture": True, "num_kv_heads": 2})
    mpt = build("mpt", {**SUPPORTED["mpt"][0], "max_seq_len": 8})
    longer = build("mpt", {**SUPPORTED["mpt"][0], "max_seq_len": 64})  # same seed: same weights
    ids, mask = ids_and_mask("left", T=20)
    for model, reference in ((falcon, falcon), (mpt, longer)):
        logits, entropies = eager(reference, ids, mask)
        with EntropyRecorder(model) as rec, torch.no_grad():
            captured = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(captured[mask.bool()], logits[mask.bool()], atol=1e-4, rtol=0)
        np.testing.assert_allclose(rec.entropy, mean_by_position(entropies, mask), atol=1e-5, rtol=0)
    with pytest.raises(RuntimeError), torch.no_grad():  # the model's own layer, as said above
        mpt(ids, attention_mask=mask)


def test_sink_mass_is_what_eager_gives_the_sink():
    from entropy_lens.capture import EntropyRecorder

    model = build("gpt_oss", SUPPORTED["gpt_oss"][0])
    ids, mask = ids_and_mask("left")
    _, _, sinks = eager(model, ids, mask, sink_mass=True)
    with EntropyRecorder(model) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    expected = mean_by_position(sinks, mask)
    assert rec.has_sinks and expected.max() > 0.05  # the sinks take a visible share
    np.testing.assert_allclose(rec.sink_mass, expected, atol=1e-5, rtol=0)


def test_a_sink_applied_after_the_softmax_is_counted_like_gpt_oss(monkeypatch):
    """Granite-SWA scales its output by the share the sink leaves; its eager weights omit the sink.
    With gpt-oss's eager function (same sink, its share visible) the model computes the same logits,
    and the capture's entropy is that distribution's, sink included."""
    import transformers.models.gpt_oss.modeling_gpt_oss as gpt_oss
    import transformers.models.granite_swa.modeling_granite_swa as granite_swa

    from entropy_lens.capture import EntropyRecorder

    model = build("granite_swa", {})
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0, 2)
    ids, mask = ids_and_mask("left")
    own_logits, _ = eager(model, ids, mask)
    monkeypatch.setattr(granite_swa, "eager_attention_forward", gpt_oss.eager_attention_forward)
    logits, entropies, sinks = eager(model, ids, mask, sink_mass=True)
    real = mask.bool()
    torch.testing.assert_close(logits[real], own_logits[real], atol=1e-4, rtol=0)
    with EntropyRecorder(model) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    assert mean_by_position(sinks, mask).max() > 0.05
    np.testing.assert_allclose(rec.entropy, mean_by_position(entropies, mask), atol=1e-5, rtol=0)


def test_trainable_scales_on_softcapped_attention_get_gradients():
    """A trainable multiplier on a model with softcapping runs the model's own eager attention."""
    from entropy_lens.capture import ScaleSession

    model = build("gemma2", SUPPORTED["gemma2"][0])
    mult = torch.nn.Parameter(torch.full((2, 4), 1.2))
    with ScaleSession(model, scales=mult):
        loss = model(torch.randint(3, 300, (1, 8))).logits.float().logsumexp(-1).mean()
    loss.backward()
    assert mult.grad is not None and mult.grad.abs().sum() > 0


# A scan per architecture (seconds each): llama (the common path) and gpt_oss (the sink mass in the file,
# fused auto's measurement) stay in the inner loop; the others' capture is test_entropy_and_logits_equal_eager's
SCAN_FAST = ("llama", "gpt_oss")


@pytest.mark.parametrize(
    "model_type",
    [m if m in SCAN_FAST else pytest.param(m, marks=pytest.mark.slow) for m in sorted(SUPPORTED)],
)
def test_scan_files_equal_eager(model_type, tmp_path):
    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model
    from entropy_lens.results import ScanResult
    from entropy_lens.runs.scan import ScanConfig, scan

    folder = save_folder(tmp_path, model_type, SUPPORTED[model_type][0])
    config = ScanConfig(model=str(folder), length=16, samples=3, data="austen:persuasion", dtype="float32")
    scan(config, out=tmp_path / "x.npz", progress=False)
    result = ScanResult.load(tmp_path / "x.npz")
    lm = load_model(str(folder), dtype="float32")
    chunks = token_chunks(lm.tokenizer, config.data, length=16, samples=3)
    ids = torch.from_numpy(chunks.ids)
    logits, entropies, sinks = eager(lm.model, ids[:, :-1], None, sink_mass=True)
    np.testing.assert_allclose(result.entropy, mean_by_position(entropies, None), atol=2e-5, rtol=0)
    if model_type == "gpt_oss":  # the results file carries the sink mass, and only for models with sinks
        np.testing.assert_allclose(result.sink_mass, mean_by_position(sinks, None), atol=2e-5, rtol=0)
        # fused "auto" measured the separate way (torch-streamed: sdpa has no sinks) against the native
        # kernel, running both on the first layers
        from entropy_lens.kernels import native_available

        cpu_fused = "native" if native_available() else "torch-streamed"
        assert result.meta["attention_path"] == "+".join(sorted({"torch-streamed", cpu_fused}))
    else:
        assert result.sink_mass is None
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(0)
    np.testing.assert_allclose(result.loss, nll.numpy(), atol=1e-4, rtol=0)


def test_a_routed_model_on_another_attention_implementation_is_refused():
    """Falcon loaded with flash-attention 2 (another layer class, other masks): refused, with the fix."""
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    model = build("falcon", SUPPORTED["falcon"][0])
    model.config._attn_implementation = "flash_attention_2"
    with (
        pytest.raises(EntropyLensError, match="load it with attn_implementation='sdpa'"),
        EntropyRecorder(model),
    ):
        pytest.fail("the recorder must refuse before any forward")
    assert not any("forward" in vars(m) for m in model.modules())


def test_a_model_that_cannot_switch_its_attention_is_refused():
    """A model whose attention classes are its own (transformers cannot switch their implementation)
    and that capture/own_attention.py does not route runs unmeasured otherwise: refused in one line."""
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    model = build("llama", {})
    model._can_set_attn_implementation = lambda: False  # as such a model says
    refused = "own code, not through transformers' attention interface"
    with pytest.raises(EntropyLensError, match=refused), EntropyRecorder(model):
        pytest.fail("the recorder must refuse before any forward")
    assert model.config._attn_implementation != "entropy_lens"


@pytest.mark.parametrize("model_type", sorted(EAGER_ONLY))
def test_eager_only_models_are_refused(model_type):
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    model = build(model_type, EAGER_ONLY[model_type])
    with (
        pytest.raises(EntropyLensError, match="runs only with transformers' eager attention"),
        EntropyRecorder(model),
    ):
        pytest.fail("the recorder must refuse before any forward")


def test_a_layer_outside_the_attention_interface_is_an_error_not_a_hole():
    """A forward in which a layer reports nothing (here: layer 1 bypasses the interface) raises."""
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    model = build("llama", {})
    attn = model.model.layers[1].self_attn
    original = attn.forward

    def own_attention(*args, **kwargs):  # as a model whose attention class computes it itself
        kwargs.pop("attention_mask", None)
        hidden = kwargs.pop("hidden_states", args[0] if args else None)
        return attn.o_proj(torch.zeros_like(hidden)), None

    attn.forward = own_attention
    try:
        missing = "layers 1 of 2 reported no attention entropy"
        with pytest.raises(EntropyLensError, match=missing), EntropyRecorder(model) as rec, torch.no_grad():
            model(torch.randint(3, 300, (1, 8)))
    finally:
        attn.forward = original
    assert rec.count.size == 0 or rec.count.all()


def test_an_attention_argument_the_capture_does_not_implement_is_refused():
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.capture.attention import entropy_lens_attention
    from entropy_lens.errors import EntropyLensError

    model = build("llama", {})
    q = torch.randn(1, 4, 5, 8, dtype=torch.float64)
    kv = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    module = model.model.layers[0].self_attn
    with EntropyRecorder(model):
        with pytest.raises(EntropyLensError, match="passes position_bias to its attention function"):
            entropy_lens_attention(module, q, kv, kv, None, position_bias=torch.zeros(1))
        out, _ = entropy_lens_attention(
            module, q, kv, kv, None, position_ids=torch.arange(5), use_cache=False
        )
    assert out.shape == (1, 5, 4, 8)


def readme_table() -> str:
    rows = ["| architecture (`model_type`) | what the test case covers | capture |", "|---|---|---|"]
    rows += [f"| `{name}` | {what} | exact |" for name, (_, what) in sorted(SUPPORTED.items())]
    rows += [
        f"| `{name}` | eager-only (neither sdpa nor flex in transformers) | refused |"
        for name in sorted(EAGER_ONLY)
    ]
    return "\n".join(rows)


def test_readme_lists_the_tested_architectures():
    page = Path(__file__).parents[2] / "docs" / "guides" / "architectures.md"
    assert readme_table() in page.read_text(encoding="utf-8"), (
        "regenerate the table in docs/guides/architectures.md: python tests/capture/test_architectures.py"
    )


@pytest.mark.slow
def test_the_survey_tool_writes_where_it_is_told(tmp_path):
    """tools/survey_architectures.py (the table's wider cousin) runs a type in a child process of its
    own and writes only under --out."""
    import json
    import subprocess

    tool = Path(__file__).parents[2] / "tools" / "survey_architectures.py"
    run = subprocess.run(
        [sys.executable, str(tool), "--out", str(tmp_path / "survey"), "llama"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    survey = json.loads((tmp_path / "survey" / "survey.json").read_text())
    assert survey["llama"]["cls"] == "EXACT", survey["llama"]
    paths = set(survey["llama"]["paddings"]["left"]["paths"])  # fused "auto" on CPU: either or both
    assert paths and paths <= {"sdpa-then-entropy", "torch-streamed", "native"}  # this checkout's names
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["llama.json", "one", "survey", "survey.json"]


if __name__ == "__main__":
    sys.stdout.write(readme_table() + "\n")


@pytest.mark.slow
def test_a_saved_alibi_folder_runs_through_every_command(tmp_path):
    """A saved BLOOM folder through the CLI: `sweep` and `ppl` at a scale equal the same commands on the
    folder of its query-scaled twin at scale 1 (the scale multiplies q·k, not the bias), the sweep's
    scale 1 gives the model's own eager loss, and `search-heads` trains its λ(h) through the ALiBi."""
    import json

    from safetensors.numpy import load_file
    from tiny import make_tokenizer

    from entropy_lens.analysis import load_sweep
    from entropy_lens.cli import main
    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model

    overrides = SUPPORTED["bloom"][0]
    folder = save_folder(tmp_path, "bloom", overrides)
    twin = tmp_path / "bloom-queries-x1.5"
    _scaled_queries(build("bloom", overrides), 1.5).save_pretrained(twin)
    make_tokenizer(COMMON["vocab_size"]).save_pretrained(twin)
    common = ["--samples", "3", "--data", "austen:persuasion", "--quiet"]

    ppl = {}
    for name, model, scale in (("scaled", folder, ["--scale", "1.5"]), ("twin", twin, [])):
        out = tmp_path / f"{name}.json"
        args = ["ppl", str(model), "--lens", "16", "24", "--stride", "4", *scale, *common, "--out", str(out)]
        assert main(args) == 0
        ppl[name] = [row["nll"] for row in json.loads(out.read_text())["lengths"]]
    np.testing.assert_allclose(ppl["scaled"], ppl["twin"], rtol=1e-5)

    sweep_dir, twin_scan = tmp_path / "sw", tmp_path / "twin.npz"
    assert (
        main(["sweep", str(folder), "--len", "16", "--scales", "1,1.5", *common, "--out", str(sweep_dir)])
        == 0
    )
    assert main(["scan", str(twin), "--len", "16", *common, "--out", str(twin_scan)]) == 0
    from entropy_lens.results import ScanResult

    sweep = load_sweep(sweep_dir)
    np.testing.assert_allclose(sweep.loss[1], ScanResult.load(twin_scan).loss, atol=1e-4, rtol=0)
    lm = load_model(str(folder), dtype="float32")
    ids = torch.from_numpy(token_chunks(lm.tokenizer, "austen:persuasion", length=16, samples=3).ids)
    logits, _ = eager(lm.model, ids[:, :-1], None)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(0)
    np.testing.assert_allclose(sweep.loss[0], nll.numpy(), atol=1e-4, rtol=0)

    heads = tmp_path / "hs.safetensors"
    args = ["search-heads", str(folder), "--len", "16", "--steps", "2", "--batch", "2", "--out", str(heads)]
    assert main([*args, "--quiet"]) == 0
    scales = np.stack(list(load_file(heads).values()))  # one (heads,) tensor per layer
    assert scales.shape == (2, 6) and scales.min() >= 1.0 and scales.max() > 1.0  # moved, above the bound


# The real configurations' attention layouts (from their config.json on the Hub), scaled down to two
# layers, a 300-token vocabulary and small MLPs: head count, head size, ALiBi settings, multi-query and
# parallel attention as released. No ALiBi weights can be downloaded here, so the weights are random.
REAL = {
    "bloom-560m": ("bloom", {"hidden_size": 1024, "n_head": 16, "num_attention_heads": 16}),
    "bloom-1b1 (the paper's)": ("bloom", {"hidden_size": 1536, "n_head": 16, "num_attention_heads": 16}),
    "mpt-7b": (
        "mpt",
        {
            "d_model": 4096,
            "hidden_size": 4096,
            "n_heads": 32,
            "num_attention_heads": 32,
            "expansion_ratio": 1,
            "max_seq_len": 2048,
            "no_bias": True,
            "attn_config": {"alibi": True, "alibi_bias_max": 8, "clip_qkv": None, "softmax_scale": None},
        },
    ),
    "falcon-7b": (
        "falcon",
        {
            "hidden_size": 4544,
            "num_attention_heads": 71,
            "multi_query": True,
            "parallel_attn": True,
            "alibi": False,
            "bias": False,
            "new_decoder_architecture": False,
            "ffn_hidden_size": 64,
        },
    ),
    "falcon-rw-1b": (
        "falcon",
        {
            "hidden_size": 2048,
            "num_attention_heads": 32,
            "multi_query": False,
            "parallel_attn": False,
            "alibi": True,
            "bias": True,
            "ffn_hidden_size": 64,
        },
    ),
}


# MPT-7B's and Falcon-7B's widths (4096, 4544) take seconds to initialise: slow; their layouts at small
# widths (SUPPORTED's "mpt" and "falcon") and the BLOOMs and Falcon-RW here keep the inner loop's
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n.endswith("-7b") else n for n in sorted(REAL)]
)
def test_real_configurations_scaled_down(name):
    """BLOOM-560m, the paper's BLOOM-1b1, MPT-7B, Falcon-7B and Falcon-RW-1B head layouts with the
    weights' usual initialisation: exact with left padding (the case that moves positions most)."""
    from entropy_lens.capture import EntropyRecorder

    model_type, overrides = REAL[name]
    model = build(
        model_type,
        {**overrides, "num_hidden_layers": 2, "n_layer": 2, "n_layers": 2, "initializer_range": 0.02},
    )
    assert model.config.num_attention_heads == overrides["num_attention_heads"]
    ids, mask = ids_and_mask("left", T=24)
    logits, entropies = eager(model, ids, mask)
    with EntropyRecorder(model) as rec, torch.no_grad():
        captured = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(captured[mask.bool()], logits[mask.bool()], atol=1e-4, rtol=0)
    expected = mean_by_position(entropies, mask)
    np.testing.assert_allclose(rec.entropy, expected, atol=1e-5, rtol=0)
    assert rec.entropy.shape[:2] == (2, overrides["num_attention_heads"]) and expected.std() > 0.05


@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_the_last_rows_probabilities_are_the_models_own(model_type):
    """`report_rows` (capture/reports.py; passkey's answer rows): the last rows' attention over every key, whole, equals
    the model's own eager probabilities (left padding; sinks' share left out, ALiBi and softcap in)."""
    from entropy_lens.capture import ScaleSession

    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask("left")
    _, expected = eager_probabilities(model, ids, mask)
    got = {}
    scaling = ScaleSession(model)
    scaling.session.reports = RowsTo(lambda layer, p: got.setdefault(layer, p), probe_rows=3)
    with scaling, torch.no_grad():
        model(ids, attention_mask=mask)
    assert sorted(got) == list(range(len(expected)))
    for layer, p in got.items():
        want = expected[layer][:, :, -3:]
        assert p.shape == want.shape and p.dtype == torch.float64
        torch.testing.assert_close(p[1], want[1], atol=1e-5, rtol=0)  # the unpadded sequence
        torch.testing.assert_close(p[0][..., 3:], want[0][..., 3:], atol=1e-5, rtol=0)  # pads: 0 here
        assert p[0][..., :3].abs().max() == 0
