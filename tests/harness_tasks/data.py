"""The local documents of the offline tasks in this folder (lm-eval's `custom_dataset`): persuasion.json,
written by make_data.py. No download, no datasets cache."""

import json
from pathlib import Path

DATA = json.loads((Path(__file__).parent / "persuasion.json").read_text(encoding="utf-8"))


def _split(name: str) -> dict:
    import datasets

    return {"test": datasets.Dataset.from_list(DATA[name])}


def next_sentence(**metadata) -> dict:
    return _split("next_sentence")


def passages(**metadata) -> dict:
    return _split("passages")


def prompts(**metadata) -> dict:
    return _split("prompts")
