"""The README's Python quick starts run as written, on the embedded tiny NoPE model: the scan and the
recorder block as they stand, the monitor block inside a loop of a few optimizer steps (the names it
leaves to the reader, `model`, `batches` and `optimizer`, given here)."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

README = Path(__file__).parents[2] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_readme_has_its_two_python_quick_starts():
    blocks = _blocks()
    assert len(blocks) == 2
    assert "scan(ScanConfig(" in blocks[0] and "AttentionMonitor(" in blocks[1]


@pytest.mark.slow
def test_the_python_quick_start_runs_as_written():
    namespace: dict = {}
    exec(compile(_blocks()[0], "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    result, rows = namespace["result"], namespace["rows"]
    layers, heads = result.entropy.shape[:2]
    assert result.entropy.shape == (layers, heads, 512) and np.isfinite(result.mean_entropy).all()
    assert namespace["rec"].mean("max_prob").shape[:2] == (layers, heads)
    assert set(rows) >= {"entropy", "distance"} and rows["entropy"].shape == (1, 4, 256)


@pytest.mark.slow
def test_the_monitor_quick_start_runs_in_a_training_loop():
    from entropy_lens import load_model

    torch.manual_seed(0)
    loaded = load_model("tiny-nope")
    model = loaded.model.train()
    ids = torch.randint(0, model.config.vocab_size, (2, 32))
    batches = [{"input_ids": ids, "labels": ids}] * 21
    namespace = {
        "model": model,
        "batches": batches,
        "optimizer": torch.optim.SGD(model.parameters(), lr=1e-3),
    }
    exec(compile(_blocks()[1], "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    mon = namespace["mon"]
    assert mon.history.steps.tolist() == [10, 20]  # every=10: the 10th and the 20th forward recorded
    # "the history is every 10th step's record": a sequence of records, as the README's comment says
    assert len(mon.history) == 2 and [r.step for r in mon.history] == [10, 20] and mon.history[-1].step == 20
    assert mon.history[0].values["entropy"].shape == (
        model.config.num_hidden_layers,
        model.config.num_attention_heads,
    )
    assert "labels" in _blocks()[1]  # the batch the snippet's .loss needs
    latest = mon.latest()["max_logit"]
    assert latest.shape == (model.config.num_hidden_layers, model.config.num_attention_heads)
    assert np.isfinite(latest).all() and "attention/max_logit/layer_0/max" in mon.scalars()


INTEGRATIONS = {  # name -> its guide (issue 70: kvpress was nowhere in the README)
    "kvpress": "docs/guides/kvpress.md",
    "vLLM": "docs/guides/vllm.md",
    "lm-eval": "docs/guides/lm-eval.md",
    "Trainer": "docs/guides/monitor.md",
    "torchrun": "docs/guides/distributed.md",
    "lm-polygraph": "docs/guides/generation.md",
    "nnsight": "docs/guides/generation.md",
}


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_what_is_supported_names_every_integration_in_one_row_with_its_guide():
    rows = [line for line in _section("What is supported").splitlines() if line.startswith("| ")]
    for name, guide in INTEGRATIONS.items():
        found = [row for row in rows if row.startswith(f"| {name} |")]
        assert len(found) == 1, f"README 'What is supported': one row '| {name} |', linking {guide}"
        assert f"]({guide})" in found[0], f"README: the {name} row links {guide}"
    kvpress = next(row for row in rows if row.startswith("| kvpress |"))
    for words in ("ObservedAttentionPress", "DuoAttention", "head_profile"):
        assert words in kvpress, words


def test_the_quick_starts_name_every_integration_in_one_line_with_its_guide():
    lines = _section("Quick start: integrations").strip().splitlines()
    assert [line.split("**")[1] for line in lines] == list(INTEGRATIONS), "one line each, in this order"
    for line, guide in zip(lines, INTEGRATIONS.values(), strict=True):
        assert line.startswith("- **") and f"]({guide})" in line, line


def test_the_documentation_list_links_every_guide():
    listed = _section("Documentation")
    guides = sorted((README.parent / "docs" / "guides").glob("*.md"))
    assert len(guides) > 10
    for guide in guides:
        assert f"](docs/guides/{guide.name})" in listed, f"README's Documentation list: link {guide.name}"
