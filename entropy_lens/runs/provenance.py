"""What software wrote a result and when (the results meta's provenance keys): imported by the writers
only, as it imports torch and transformers for their versions (entropy_lens.results stays numpy-only)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from entropy_lens.results import SCHEMA_VERSION
from entropy_lens.results.files import beside_record, recorded_file

if TYPE_CHECKING:
    from entropy_lens.models import LoadedModel

__all__ = ["git_hash", "model_facts", "provenance", "recorded_settings", "settings_files"]


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


def model_facts(lm: LoadedModel, record: str | Path | None) -> dict:
    """`lm.facts()` as the output at `record` records them: a bundled model or Hub id by its portable name
    (`LoadedModel.portable_source`), the user's own folder or file named from the output
    (`beside_record`); the absolute path where nothing is written (`record` None)."""
    facts = lm.facts()
    if record is not None and lm.portable_source is None:
        facts["model_source"] = beside_record(lm.source, record)
    return facts


def recorded_settings(settings: dict, record: str | Path | None) -> dict:
    """A config's `to_dict()` as the output at `record` stores it: its --head-scales file named from the
    output (`beside_record`); as given where nothing is written."""
    if record is None or not isinstance(settings.get("head_scales"), str):
        return settings
    return {**settings, "head_scales": beside_record(settings["head_scales"], record)}


def settings_files(settings, record: str | Path):
    """Stored settings (`recorded_settings`, read back from the output at `record`) as two records of one
    run compare: the --head-scales file as the absolute path of the file it names, so a record written
    before `beside_record` (which names it by its absolute path) still resumes."""
    if not isinstance(settings, dict) or not isinstance(settings.get("head_scales"), str):
        return settings
    return {**settings, "head_scales": str(recorded_file(settings["head_scales"], record))}


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
