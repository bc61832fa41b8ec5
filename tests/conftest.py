import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _seed_and_isolate_cache(tmp_path_factory, monkeypatch):
    import torch

    torch.manual_seed(0)
    # Model caches go to a per-session folder, never the user's home.
    monkeypatch.setenv("ENTROPY_LENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny GQA Llama folder (2 layers, 4 query heads over 2 KV heads, head_dim 16)."""
    from tiny import make_tiny_dir

    return make_tiny_dir(tmp_path_factory.mktemp("tiny") / "tiny-gqa")
