"""The command line that rebuilds a settings dataclass through its generated flags (`command_words`):
the command a sweep's index records (runs/sweep.py's `sweep_command`)."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import MISSING
from typing import Any

from entropy_lens.settings.declare import SETTING, flag_of


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
        flag = flag_of(field.name, spec)
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
