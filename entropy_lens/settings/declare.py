"""Declaring a run setting: `setting(...)`, the dataclass field that carries its flag's description
and range (the package docstring says how a flag is generated from it), the ceilings and shared ranges,
`documented` (a config's "Args:" from its settings), and what a field's default and flag are."""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from dataclasses import MISSING
from typing import Any

SETTING = "entropy_lens.setting"  # the key of a field's metadata that holds its flag's description

# The longest sequence (window, prompt, training length) any setting may ask for: 4,194,304 tokens. Exact
# attention entropy is out of reach of one machine well before it (one head's T² scores at 4M tokens are
# 1.8e13 products per layer), and the token ids of a prompt this long take a few hundred MB while it is
# built, so a mistyped length (an extra digit, 1e20) is refused instead of filling memory.
MAX_TOKENS = 1 << 22
# The most windows, steps or trials a count may ask for (16,777,216): years of work on any model, and
# still an index array numpy holds (1e20 would overflow int64 into a traceback).
MAX_COUNT = 1 << 24
MAX_SEED = 2**32 - 1  # the seeds numpy, torch and random all take
PASSKEY_MOST = 1000  # the most depths, and the most keys, of a passkey run: a hundred times the paper's 10

# Ranges of settings a flag (`setting(..., **SCALE)`) and a Python keyword (`check_argument`) both take
SCALE = {"above": 0}  # an attention scale multiplier s (λ = s/√d): 0 would be no scale at all


def setting(
    default: Any = MISSING,
    *,
    help: str,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    metavar: str | None = None,
    choices: tuple | None = None,
    type: Any = None,
    nargs: str | None = None,
    cli: bool = True,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    default_factory: Any = MISSING,
) -> Any:
    """A dataclass field with its flag's description and range (see the module docstring)."""
    meta = {
        SETTING: {
            "help": help,
            "flag": flag,
            "aliases": tuple(aliases),
            "metavar": metavar,
            "choices": choices,
            "type": type,
            "nargs": nargs,
            "cli": cli,
            "at_least": at_least,
            "above": above,
            "at_most": at_most,
        }
    }
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def documented(*classes) -> None:
    """Append to each config dataclass's docstring a Google-style "Args:" section (the API reference's
    parameter table, sphinx.ext.napoleon): per setting its flag's help, flag and range, one text."""
    for cls in classes:
        entries = []
        for f in (f for f in dataclasses.fields(cls) if SETTING in f.metadata and f.init):
            spec = f.metadata[SETTING]
            flag = flag_of(f.name, spec)
            where = flag if flag.startswith("-") else "the argument " + (spec["metavar"] or flag.upper())
            words = range_words(at_least=spec["at_least"], above=spec["above"], at_most=spec["at_most"])
            entry = f"{f.name}: {spec['help']} ({where if spec['cli'] else 'no flag'}{f'; {words}' * bool(words)})."
            entries.append(
                textwrap.fill(
                    entry, 100, initial_indent=" " * 4, subsequent_indent=" " * 8, break_on_hyphens=False
                )
            )
        cls.__doc__ = inspect.cleandoc(cls.__doc__ or "") + "\n\nArgs:\n" + "\n".join(entries) + "\n"


def range_words(*, at_least=None, above=None, at_most=None) -> str | None:
    """'at least 1 and at most 8', 'above 0', ...; None when nothing is declared."""
    low = (
        f"at least {at_least}" if at_least is not None else (f"above {above}" if above is not None else None)
    )
    high = f"at most {at_most}" if at_most is not None else None
    return " and ".join(w for w in (low, high) if w) or None


def field_default(field: dataclasses.Field):
    """A dataclass field's default (its factory's value), or MISSING for a required field."""
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    return MISSING


def flag_of(name: str, spec: dict) -> str:
    """The flag of the field `name` whose setting is `spec` (its metadata): the declared one, else
    `--field-name` ('samples' -> '--samples')."""
    return spec.get("flag") or "--" + name.replace("_", "-")
