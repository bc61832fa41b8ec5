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
import shlex
from dataclasses import MISSING
from typing import Any

__all__ = ["SETTING", "command_words", "setting"]

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


def command_words(config: Any, *, defaults: dict | None = None, exclude: tuple[str, ...] = ()) -> list[str]:
    """The command-line words that rebuild the settings dataclass `config` through its generated flags:
    the positional arguments, then the required flags and each flag whose value differs from its default (`defaults` replaces
    some, for a command with defaults of its own), shell-quoted. Fields without a flag or in `exclude`
    are left out. A value no flag can give (False where the default is True) raises ValueError."""
    positional, flags = [], []
    fields = sorted(dataclasses.fields(config), key=lambda f: f.default is not MISSING)  # required first
    for field in fields:
        spec = field.metadata.get(SETTING)
        if spec is None or not spec["cli"] or field.name in exclude:
            continue
        value = getattr(config, field.name)
        default = (defaults or {}).get(field.name, field.default)
        flag = spec["flag"] or "--" + field.name.replace("_", "-")
        if not flag.startswith("-"):
            positional.append(shlex.quote(str(value)))
        elif default is MISSING or value != default:
            if value is True:
                flags.append(flag)
            elif value is False and default is None:  # a three-state flag: --no-<flag>
                flags.append("--no-" + flag.removeprefix("--"))
            elif value is False:
                raise ValueError(
                    f"{field.name}=False has no flag (its flag sets True; the default is {default})"
                )
            elif value is not None:
                values = value if isinstance(value, (list, tuple)) else [value]
                flags += [flag, *(shlex.quote(str(v)) for v in values)]
    return positional + flags
