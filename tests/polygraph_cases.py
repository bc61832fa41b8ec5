"""entropy_lens.polygraph against lm-polygraph itself. Runs only in the lm-polygraph environment
(.venv-polygraph), in a child process that tests/polygraph/test_polygraph.py starts; elsewhere every case
skips.
- attention_all: LensGreedyProbsCalculator on the model's sdpa attention, on a left-padded batch of two
  texts, gives lm-polygraph's own GreedyProbsCalculator's statistics on eager attention with
  output_attentions=True for each text alone (the same greedy tokens, log-probabilities, texts;
  attention_all to float32's rounding), on three families (Llama GQA, Qwen2, Qwen3), 16 generated
  tokens each. lm-polygraph's own calculator is compared text by text: on a batch it reads
  every text's attention from the batch's first text (`attentions[j][layer][0]`), so its attention_all
  of a second text is the first's (checked here, and said in the guide);
- RAUQ, lm-polygraph's own estimator unchanged, gives the same uncertainty (≤ 1e-5 relative) fed by ours
  as fed by its own calculator; and through `estimate_uncertainty` (its UEManager on `stat_calculators`).
- the benchmark (benchmarks/polygraph_cpu.py) at a toy size: both routes, equal uncertainties, its table.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("lm_polygraph", reason="lm-polygraph is not installed (make polygraph-env builds it)")
from architectures import SUPPORTED, build
from lm_polygraph import WhiteboxModel
from lm_polygraph.estimators import RAUQ
from lm_polygraph.stat_calculators.greedy_probs import GreedyProbsCalculator
from tiny import make_tokenizer

from entropy_lens.polygraph import LensGreedyProbsCalculator, estimate_uncertainty, stat_calculators

# Llama (GQA), Qwen2 (bias on q, k, v), Qwen3 (q/k norms), each with full attention in every layer:
# lm-polygraph's own calculator stops on a model whose layers' caches differ in length (Qwen2's or
# Gemma 2's sliding-window layers beside full ones: its vstack of the layers' rows), ours does not
FAMILIES = {"llama": {}, "qwen2": {"use_sliding_window": False}, "qwen3": SUPPORTED["qwen3"][0]}
TEXTS = ["The grass is green. The sky is", "Here we go, there and back again, and"]
NEW = 16


def whitebox(family: str, attention: str) -> WhiteboxModel:
    # 6 layers: RAUQ reads layers L // 3 .. ceil(2L / 3), past the end of a 2-layer model
    model = build(family, {**FAMILIES[family], "num_hidden_layers": 6})
    eos = make_tokenizer().eos_token_id

    def no_end(module, args, logits):  # every text writes its NEW tokens: every step compared
        logits[..., eos] = logits.amin(-1) - 10.0
        return logits

    model.lm_head.register_forward_hook(no_end)
    model.set_attn_implementation(attention)
    tokenizer = make_tokenizer(model.config.vocab_size)
    tokenizer.pad_token, tokenizer.padding_side = tokenizer.eos_token, "left"
    wb = WhiteboxModel(model, tokenizer, model_path=family)
    wb.generation_parameters.max_new_tokens = NEW
    return wb


def both(family: str) -> tuple[dict, list[dict], WhiteboxModel, dict]:
    """(ours on sdpa for the batch, lm-polygraph's on eager for each text alone, our model, lm-polygraph's
    on eager for the batch)."""
    torch.manual_seed(0)
    ours_model, theirs_model = whitebox(family, "sdpa"), whitebox(family, "eager")
    theirs_model.model.load_state_dict(ours_model.model.state_dict())
    theirs = GreedyProbsCalculator(output_attentions=True)
    with torch.no_grad():
        ours = LensGreedyProbsCalculator()({}, TEXTS, ours_model, max_new_tokens=NEW)
        alone = [theirs({}, [text], theirs_model, max_new_tokens=NEW) for text in TEXTS]
        batched = theirs({}, TEXTS, theirs_model, max_new_tokens=NEW)
    return ours, alone, ours_model, batched


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_all_and_rauq_equal_lm_polygraphs_own(family):
    ours, alone, model, batched = both(family)
    assert all(len(t) >= NEW for t in ours["greedy_tokens"])  # no early end: every step compared
    for i, theirs in enumerate(alone):
        assert ours["greedy_tokens"][i] == theirs["greedy_tokens"][0], f"{family} text {i}"
        np.testing.assert_allclose(ours["attention_all"][i], theirs["attention_all"][0], atol=2e-5, rtol=0)
        np.testing.assert_allclose(  # float32 through 6 layers, a padded batch on sdpa against eager alone
            ours["greedy_log_likelihoods"][i], theirs["greedy_log_likelihoods"][0], atol=1e-4, rtol=0
        )
        # RAUQ fed by our attention_all and by its own, everything else the same: the attention's part
        got = RAUQ()({**theirs, "attention_all": [ours["attention_all"][i]], "model": model})
        want = RAUQ()({**theirs, "model": model})
        np.testing.assert_allclose(got, want, rtol=1e-5)
    # lm-polygraph's own calculator on the batch: the second text's attention is the first's
    np.testing.assert_array_equal(batched["attention_all"][1], batched["attention_all"][0])
    assert np.abs(ours["attention_all"][1] - ours["attention_all"][0]).max() > 0.1


def test_estimate_uncertainty_runs_lm_polygraphs_manager_on_our_calculators():
    """lm-polygraph's UEManager builds LensGreedyProbsCalculator from `stat_calculators` (its builder is
    entropy_lens.polygraph) and RAUQ's uncertainty is the one computed from our statistics directly."""
    names = [sc.name for sc in stat_calculators("Whitebox")]
    assert "LensGreedyProbsCalculator" in names and "GreedyProbsCalculator" not in names
    _, _, model, _ = both("llama")
    out = estimate_uncertainty(model, RAUQ(), TEXTS[0])
    direct = LensGreedyProbsCalculator()({}, TEXTS[:1], model, max_new_tokens=NEW)
    np.testing.assert_allclose(out.uncertainty, RAUQ()({**direct, "model": model})[0], rtol=1e-6)


@pytest.mark.parametrize("gen_only", [False, True])
@pytest.mark.parametrize("family", FAMILIES)
def test_attention_score_equals_lm_polygraphs_own(family, gen_only):
    """AttentionScore on the own-key probabilities of the teacher-forced forward (forward.py) gives the
    uncertainty lm-polygraph's own gives on its eager maps of the same forward."""
    from lm_polygraph.estimators import AttentionScore as TheirAttentionScore
    from lm_polygraph.stat_calculators.attention_forward_pass import AttentionForwardPassCalculator

    from entropy_lens.polygraph.forward import AttentionScore, LensForwardpassDiagonalCalculator

    torch.manual_seed(0)
    ours_model, theirs_model = whitebox(family, "sdpa"), whitebox(family, "eager")
    theirs_model.model.load_state_dict(ours_model.model.state_dict())
    for text in TEXTS:
        with torch.no_grad():
            deps = GreedyProbsCalculator()({}, [text], theirs_model, max_new_tokens=NEW)
            maps = AttentionForwardPassCalculator()(deps, [text], theirs_model)
            diagonal = LensForwardpassDiagonalCalculator()(deps, [text], ours_model)
        want = TheirAttentionScore(gen_only=gen_only)({**deps, **maps, "model": theirs_model})
        got = AttentionScore(gen_only=gen_only)({**deps, **diagonal, "model": ours_model})
        layer = theirs_model.model.config.num_hidden_layers // 2
        own = np.diagonal(maps["forwardpass_attention_weights"][0][layer], axis1=-2, axis2=-1)
        np.testing.assert_allclose(diagonal["forwardpass_attention_diagonal"][0][layer], own, atol=2e-5)
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_estimate_uncertainty_runs_attention_score_on_the_diagonal():
    """UEManager resolves AttentionScore's forwardpass_attention_diagonal to our calculator
    (stat_calculators adds it; its builder is entropy_lens.polygraph.forward)."""
    from entropy_lens.polygraph.forward import AttentionScore, LensForwardpassDiagonalCalculator

    _, _, model, _ = both("llama")
    out = estimate_uncertainty(model, AttentionScore(), TEXTS[0])
    deps = LensGreedyProbsCalculator()({}, TEXTS[:1], model, max_new_tokens=NEW)
    diagonal = LensForwardpassDiagonalCalculator()(deps, TEXTS[:1], model)
    np.testing.assert_allclose(
        out.uncertainty, AttentionScore()({**deps, **diagonal, "model": model})[0], rtol=1e-6
    )


def test_the_benchmark_runs_both_routes_and_finds_them_equal(benchmark_script, tmp_path, monkeypatch):
    """benchmarks/polygraph_cpu.py at a toy size: lm-polygraph's own route and the lens on the embedded
    tiny-nope, each timed with its peak memory, the same greedy tokens and uncertainties (1e-5 relative),
    and the benchmarks page's table made from its JSON. Each route's worker in this process
    (tests/bench_children.py), one command per route; in a child process of its own under make test-full."""
    import json

    from bench_children import children_in_process

    bench = benchmark_script("polygraph_cpu")
    commands = children_in_process(bench, monkeypatch)
    out = tmp_path / "polygraph_cpu.json"
    assert bench.main(["--model", "tiny-nope", "--lengths", "96", "--new", "4", "--out", str(out)]) == 0
    if commands:
        assert [c[c.index("--worker") + 1 :] for c in commands] == [["own", "96"], ["lens", "96"]]
    own, lens = sorted(json.loads(out.read_text(encoding="utf-8"))["rows"], key=lambda r: r["mode"] != "own")
    for row in (own, lens):
        assert row["prompt_tokens"] == 96 and row["new"] == 4 and len(row["tokens"]) == 4, row
        assert 0 < row["generate_s"] < row["total_s"] and 0 < row["forward_s"] < row["total_s"]
        assert row["peak_rss_mb"] > 0 and np.isfinite([row["rauq"], row["attention_score"]]).all()
    assert lens["same_tokens"] and lens["rauq_rel_diff"] < 1e-5 and lens["attention_score_rel_diff"] < 1e-5
    made = benchmark_script("readme_tables").polygraph_cpu_table(json.loads(out.read_text(encoding="utf-8")))
    assert "| 96 | lens (sdpa) |" in made and "lm-polygraph (eager): ran up to 96 tokens" in made


def test_lm_polygraphs_own_attention_score_runs_as_ours_through_estimate_uncertainty():
    """Issue 77, item 6: lm-polygraph's AttentionScore on an sdpa model stopped at its torch.cat of no maps;
    estimate_uncertainty runs ours in its place (its layer and gen_only kept, its name as the result's)."""
    from lm_polygraph.estimators import AttentionScore as TheirAttentionScore

    from entropy_lens.polygraph.forward import AttentionScore

    _, _, model, _ = both("llama")
    for kw in ({}, {"layer": 1, "gen_only": True}):
        theirs = estimate_uncertainty(model, TheirAttentionScore(**kw), TEXTS[0])
        ours = estimate_uncertainty(model, AttentionScore(**kw), TEXTS[0])
        # named as lm-polygraph names its own (its layer resolved when it runs)
        assert (
            theirs.estimator
            == ours.estimator
            == f"AttentionScore{' gen-only' if kw else ''} (layer={kw.get('layer', 3)})"
        )
        # two runs of one route (the recorder may time its fused and separate passes and pick either)
        assert np.isfinite(ours.uncertainty)
        np.testing.assert_allclose(theirs.uncertainty, ours.uncertainty, rtol=1e-6)


def manager(model, estimators, texts, **kw):
    from lm_polygraph.utils.builder_enviroment_stat_calculator import BuilderEnvironmentStatCalculator
    from lm_polygraph.utils.dataset import Dataset
    from lm_polygraph.utils.manager import UEManager

    return UEManager(
        Dataset(texts, [""] * len(texts), batch_size=2),
        model,
        estimators,
        builder_env_stat_calc=BuilderEnvironmentStatCalculator(model),
        available_stat_calculators=stat_calculators("Whitebox"),
        generation_metrics=[],
        ue_metrics=[],
        processors=[],
        ignore_exceptions=False,
        verbose=False,
        max_new_tokens=NEW,
        **kw,
    )


def test_lm_polygraphs_own_attention_score_in_a_manager_is_refused_in_one_line_off_eager():
    """In a UEManager of the user's own, lm-polygraph's AttentionScore needs eager maps: on sdpa one line
    names ours; on eager its own calculator runs, and gives ours's uncertainty."""
    from lm_polygraph.estimators import AttentionScore as TheirAttentionScore

    from entropy_lens.errors import EntropyLensError
    from entropy_lens.polygraph.forward import AttentionScore

    _, _, model, _ = both("llama")
    with pytest.raises(
        EntropyLensError, match=r"'sdpa' attention .*entropy_lens\.polygraph\.forward\.AttentionScore"
    ) as err:
        manager(model, [TheirAttentionScore()], TEXTS)()
    assert "\n" not in str(err.value)
    model.model.set_attn_implementation("eager")
    theirs = manager(model, [TheirAttentionScore()], TEXTS)
    theirs()
    model.model.set_attn_implementation("sdpa")
    ours = manager(model, [AttentionScore()], TEXTS)
    ours()
    key = ("sequence", str(AttentionScore()))
    np.testing.assert_allclose(ours.estimations[key], theirs.estimations[key], rtol=1e-5)


def test_a_hugging_face_model_is_wrapped_with_its_tokenizer_or_refused_naming_whitebox_model():
    """Issue 80, item 1: the model load_model returns, with its tokenizer, runs as the WhiteboxModel
    holding it (the same uncertainty and text); without its tokenizer, or anything else, one line names
    WhiteboxModel. The caller's tokenizer is left as it was."""
    from entropy_lens.errors import EntropyLensError

    _, _, wrapped, _ = both("llama")
    model, tokenizer = wrapped.model, make_tokenizer(wrapped.model.config.vocab_size)
    side, pad = tokenizer.padding_side, tokenizer.pad_token
    got = estimate_uncertainty(model, RAUQ(), TEXTS[0], tokenizer=tokenizer, max_new_tokens=NEW)
    want = estimate_uncertainty(wrapped, RAUQ(), TEXTS[0])
    assert got.generation_tokens == want.generation_tokens
    np.testing.assert_allclose(got.uncertainty, want.uncertainty, rtol=1e-6)
    assert (tokenizer.padding_side, tokenizer.pad_token) == (side, pad)
    for args, kw, words in (
        (
            (model,),
            {},
            "needs its tokenizer to be wrapped in a WhiteboxModel; pass lm_polygraph's WhiteboxModel",
        ),
        (
            ("tiny-nope",),
            {},
            "model is str, not a model lm-polygraph runs; pass lm_polygraph's WhiteboxModel",
        ),
        ((wrapped,), {"tokenizer": tokenizer}, "tokenizer given with a WhiteboxModel"),
        ((model,), {"tokenizer": tokenizer, "max_new_tokens": 0}, "max_new_tokens must be at least 1"),
    ):
        with pytest.raises(EntropyLensError, match=words) as err:
            estimate_uncertainty(*args, RAUQ(), TEXTS[0], **kw)
        assert "\n" not in str(err.value)


def test_the_end_token_refusal_prints_the_counts_that_differ():
    """Issue 77, item 6: lm-polygraph's 12 tokens against a recorder whose rows are finite for 4 steps
    (the counts printed were 12 and 12)."""
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.polygraph import attention_all

    probs = np.full((1, 12, 2, 3, 12), np.nan)
    probs[0, :4] = 0.25
    with pytest.raises(
        EntropyLensError, match="lm-polygraph kept 12 generated tokens .*a finite row for 4 of its 12 steps"
    ):
        attention_all(probs, [list(range(12))])
    assert len(attention_all(probs, [list(range(4))])) == 1  # the same 4 tokens: no refusal


def test_the_guides_block_runs_as_written(tmp_path, monkeypatch):
    """Issue 80, item 1: the generation guide's lm-polygraph block (fenced python3), as written: one text
    through estimate_uncertainty on load_model's model and tokenizer, then three through a UEManager on
    whitebox_model's WhiteboxModel, each estimator one finite uncertainty per text; the manager's first
    text (in a left-padded batch of two) gives estimate_uncertainty's RAUQ."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "guides" / "generation.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```python3\n(.*?)```", page, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "docs/guides/generation.md", "exec"), namespace)  # noqa: S102 - the page's own code
    out, man, texts = namespace["out"], namespace["manager"], namespace["texts"]
    assert np.isfinite(out.uncertainty) and out.generation_text
    for estimator in namespace["estimators"]:
        values = man.estimations[estimator.level, str(estimator)]
        assert len(values) == len(texts) and np.isfinite(values).all(), estimator
    rauq = man.estimations["sequence", str(RAUQ())]
    np.testing.assert_allclose(rauq[0], out.uncertainty, rtol=1e-4)
