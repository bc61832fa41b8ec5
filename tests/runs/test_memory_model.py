"""The memory model of a scan rank (runs/memory_model.py): its terms behave as docs/scaling.md says, its
table there is its own output, and its shapes are the models'."""

from pathlib import Path

import pytest

from entropy_lens.runs.memory_model import SHAPES, rank_bytes, ranks_table, smallest_ranks

DOCS = Path(__file__).parents[2] / "docs" / "scaling.md"


def test_the_docs_table_is_the_models_output():
    text = DOCS.read_text(encoding="utf-8")
    table = text.split("<!-- ranks_table -->\n", 1)[1].split("\n<!-- /ranks_table -->", 1)[0]
    assert table == ranks_table(), "regenerate docs/scaling.md's table: memory_model.ranks_table()"


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_what_shrinks_with_the_ranks_and_what_does_not(name):
    shape, tokens = SHAPES[name], 1 << 20
    one, two, eight = (rank_bytes(shape, tokens, p) for p in (1, 2, 8))
    assert one["gathered"] == 0 < two["gathered"] == eight["gathered"]  # the whole sequence's K and V
    for term in ("residual", "attention", "mlp"):
        assert eight[term] < two[term] < one[term]
        assert two[term] == pytest.approx(one[term] / 2, rel=1e-3)
    for term in ("weights", "loss", "host_sums"):
        assert one[term] == two[term] == eight[term]
    assert eight["peak"] < two["peak"]
    assert one["peak"] == one["weights"] + one["activations"]
    sdpa = rank_bytes(shape, tokens, 2, sdpa_output=True)
    cpu = rank_bytes(shape, tokens, 2, sdpa_output=True, device="cpu")
    assert sdpa["sdpa"] > cpu["sdpa"] > 0 == two["sdpa"]  # K and V repeated per query head off CPU only
    assert sdpa["peak"] >= cpu["peak"] >= two["peak"]


def test_the_smallest_ranks_fit_and_one_fewer_does_not():
    device = 80e9
    for shape in SHAPES.values():
        for tokens in (1 << 17, 1 << 20, 1 << 22):
            p = smallest_ranks(shape, tokens, device_bytes=device)
            assert p is not None and rank_bytes(shape, tokens, p)["peak"] <= 0.9 * device
            if p > 1:
                assert rank_bytes(shape, tokens, p - 1)["peak"] > 0.9 * device
    # a device smaller than the weights holds no rank, however many
    assert smallest_ranks(SHAPES["Llama-3-8B"], 1 << 20, device_bytes=8e9) is None


@pytest.mark.slow
def test_smollm2s_shape_is_the_bundled_models():
    pytest.importorskip("gguf")
    from entropy_lens.models import load_model

    try:
        lm = load_model("smollm2")
    except Exception as err:  # noqa: BLE001 - the bundled package is optional
        pytest.skip(f"smollm2 is not installed here: {err}")
    config, shape = lm.model.config, SHAPES["SmolLM2-135M"]
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (
        shape.layers,
        shape.heads,
        shape.kv_heads,
    )
    assert (lm.head_dim, config.hidden_size, config.intermediate_size, config.vocab_size) == (
        shape.head_dim,
        shape.hidden,
        shape.intermediate,
        shape.vocab,
    )
    assert sum(p.numel() for p in lm.model.parameters()) == shape.params
