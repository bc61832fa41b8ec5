"""Checkpoints named as on the Hugging Face Hub (`org/name`), resolved through huggingface_hub's cache.

    folder = hub_snapshot("AntNLP/TinyLlama-NoPE-1.1B", revision=None)   # a snapshot folder in the cache

The cache is huggingface_hub's own (`HF_HUB_CACHE`, `HF_HOME`), shared with every other tool that
uses it; `HF_HUB_OFFLINE=1` (or no network) uses it alone. Only what loading needs is fetched: the
config, safetensors weights (and their index) and tokenizer files, never `.bin` pickles or other
frameworks' weights. A name missing from the cache with no way to reach the Hub is one line that says
so and how to fix it.
"""

from __future__ import annotations

import re
from pathlib import Path

from entropy_lens.errors import EntropyLensError, first_line

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.tiktoken", "*.txt"]


def looks_like_hub_id(name: str) -> bool:
    """'org/name' that is not a path on this machine."""
    return bool(HUB_ID.match(name)) and not Path(name).expanduser().exists()


def hub_snapshot(repo_id: str, *, revision: str | None = None) -> Path:
    """The local snapshot folder of `repo_id` at `revision` (default: the main branch), downloaded
    into huggingface_hub's cache unless it is there already or the Hub is off (HF_HUB_OFFLINE=1)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision}" if revision else ""
    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=PATTERNS)
    except LocalEntryNotFoundError:
        raise EntropyLensError(
            f"{repo_id}{at} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and the Hub "
            "cannot be reached (HF_HUB_OFFLINE is set or there is no network); download it once where "
            f"there is network (`hf download {repo_id}`), or pass a local folder"
        ) from None
    except GatedRepoError:
        raise EntropyLensError(
            f"{repo_id} is gated: accept its terms on the Hub and log in (`hf auth login`), or pass a "
            "local folder"
        ) from None
    except RevisionNotFoundError:
        raise EntropyLensError(
            f"{repo_id} has no revision {revision!r}; pass a branch, tag or commit"
        ) from None
    except RepositoryNotFoundError:
        raise EntropyLensError(
            f"{repo_id} is not a model on the Hugging Face Hub (or it is private: log in with "
            "`hf auth login`); check the name, or pass a local folder"
        ) from None
    except (OSError, ValueError) as e:
        raise EntropyLensError(f"cannot fetch {repo_id}{at} ({first_line(e)}); pass a local folder") from None
    return Path(folder)
