"""Write persuasion.json, the local data of the offline lm-eval tasks in this folder, from the novel the
embedded models never saw in training (Persuasion: they were trained on austen-minus:persuasion).

    python tests/harness_tasks/make_data.py

next_sentence  4-way multiple choice: two sentences of the novel, then which of four sentences comes next
               (the true one and three drawn from far away in the book)
passages       paragraphs, for loglikelihood_rolling perplexity
prompts        a sentence's first words and the rest of it, for generation
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from entropy_lens.data.corpora import load_documents

HERE = Path(__file__).parent
SEED = 0


def sentences(text: str) -> list[str]:
    """The novel's sentences of 6 to 30 words, whitespace collapsed, chapter headings dropped."""
    body = text[text.index("Chapter 1") :]
    flat = re.sub(r"\s+", " ", re.sub(r"Chapter \d+", " ", body))
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z\"])", flat)
    return [p.strip() for p in parts if 6 <= len(p.split()) <= 30]


def main() -> None:
    text = load_documents("austen:persuasion")[0][0]
    sent = sentences(text)
    rng = np.random.default_rng(SEED)
    items = []
    for j in rng.choice(np.arange(2, len(sent) - 1), size=40, replace=False):
        far = [i for i in rng.choice(len(sent), size=12, replace=False) if abs(int(i) - int(j)) > 50][:3]
        choices = [sent[j], *(sent[i] for i in far)]
        order = rng.permutation(4)
        items.append(
            {
                "context": f"{sent[j - 2]} {sent[j - 1]}",
                "choices": [choices[o] for o in order],
                "gold": int(np.flatnonzero(order == 0)[0]),
            }
        )
    paragraphs = [re.sub(r"\s+", " ", p).strip() for p in text.split("\n\n")]
    passages = [p for p in paragraphs if 80 <= len(p.split()) <= 160][:12]
    prompts = []
    for j in rng.choice(len(sent), size=20, replace=False):
        words = sent[j].split()
        prompts.append({"prompt": " ".join(words[:5]), "rest": " " + " ".join(words[5:])})
    data = {"next_sentence": items, "passages": [{"text": p} for p in passages], "prompts": prompts}
    (HERE / "persuasion.json").write_text(
        json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
