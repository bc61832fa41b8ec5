"""The lm-polygraph route's pages agree (issue 80, item 1): the README, the generation guide and the module
docstring of entropy_lens.polygraph (read as text: lm-polygraph is not in .venv) call estimate_uncertainty
on a Hugging Face model with its tokenizer and name lm-polygraph's WhiteboxModel; the guide's runnable
block (run as written by tests/polygraph_cases.py in .venv-polygraph) builds the model, wraps it and runs
a UEManager."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGES = {
    "README.md": ROOT / "README.md",
    "the guide": ROOT / "docs" / "guides" / "generation.md",
    "the module docstring": ROOT / "entropy_lens" / "polygraph" / "__init__.py",
}
CALL = re.compile(r"estimate_uncertainty\([\w.]+, RAUQ\(\), [^,]+, tokenizer=[\w.]+")


def test_every_page_calls_it_on_a_model_with_its_tokenizer_and_names_whitebox_model():
    for page, path in PAGES.items():
        text = path.read_text(encoding="utf-8")
        assert CALL.search(text), page
        assert "WhiteboxModel" in text, page


def test_the_guide_has_one_runnable_block_with_a_ue_manager():
    page = PAGES["the guide"].read_text(encoding="utf-8")
    (block,) = re.findall(r"```python3\n(.*?)```", page, flags=re.DOTALL)
    for words in ("load_model(", "tokenizer=loaded.tokenizer", "whitebox_model(", "UEManager(", "manager()"):
        assert words in block, words
