"""Run settings declared once: each is a dataclass field that carries its flag's help text, and the CLI
generates the flag from it (`cli/options.py`) with the dataclass default, so a setting is added or
changed in one place.

    @dataclass(frozen=True, kw_only=True)
    class ScanConfig(ModelSettings, ...):
        samples: int = setting(8, help="packed chunks to average over")
        model: str = setting(help="...", flag="model", metavar="CKPT")   # positional, no default: required

`flag` defaults to `--field-name`; a name without a leading dash is a positional argument. `metavar`,
`choices` and `type` (for a list or tuple field: the element type, with `nargs`) go to argparse as
they are. A field with `setting(..., cli=False)` has no flag. Names and meanings follow the glossary
(README: Glossary).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import Any

__all__ = ["SETTING", "setting"]

SETTING = "entropy_lens.setting"  # the key of a field's metadata that holds its flag's description


def setting(
    default: Any = MISSING,
    *,
    help: str,
    flag: str | None = None,
    metavar: str | None = None,
    choices: tuple | None = None,
    type: Any = None,
    nargs: str | None = None,
    cli: bool = True,
    default_factory: Any = MISSING,
) -> Any:
    """A dataclass field with its flag's description (see the module docstring)."""
    meta = {
        SETTING: {
            "help": help,
            "flag": flag,
            "metavar": metavar,
            "choices": choices,
            "type": type,
            "nargs": nargs,
            "cli": cli,
        }
    }
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)
