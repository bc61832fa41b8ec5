"""What software wrote a result and when (the results meta's provenance keys): imported by the writers
only, as it imports torch and transformers for their versions (entropy_lens.results stays numpy-only)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

from entropy_lens.results import SCHEMA_VERSION

__all__ = ["git_hash", "provenance"]


def provenance() -> dict:
    """The meta keys that say what software wrote a result and when: schema and package versions, the
    git commit, torch and transformers versions, the UTC time (torch is imported only here, when a writer asks)."""
    import torch
    import transformers

    from entropy_lens import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "entropy_lens_version": __version__,
        "git_hash": git_hash(),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def git_hash() -> str | None:
    """The package's git commit (with '+dirty' for local changes), or None outside a checkout."""
    here = Path(__file__).resolve().parent
    git = ["git", "-C", str(here)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
