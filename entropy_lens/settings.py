"""Run settings declared once: each is a dataclass field that carries its flag's help text and the range
its values may take, and the CLI generates the flag from it (`cli/options.py`) with the dataclass
default, so a setting is added or changed in one place.

    @dataclass(frozen=True, kw_only=True)
    class ScanConfig(Checked, ModelSettings, ...):
        samples: int = setting(8, at_least=1, at_most=MAX_COUNT, help="packed chunks to average over")
        model: str = setting(help="...", flag="model", metavar="CKPT")   # positional, no default: required

`flag` defaults to `--field-name`; a name without a leading dash is a positional argument. `aliases`
are a renamed flag's old names: they still work, and the help says which name is the old one. `metavar`,
`choices` and `type` (for a list or tuple field: the element type, with `nargs`) go to argparse as
they are. A field with `setting(..., cli=False)` has no flag. A `bool` field is a switch; a `bool | int`
field a switch that may take a number (`--context-parallel` alone is True, `--context-parallel 2` is 2),
whose range applies to the number only. Names and meanings follow the glossary
(docs/reference/glossary.md).

Ranges: `at_least=a` (value >= a), `above=a` (value > a) and `at_most=b` (value <= b), on a number or on
each element of a list of numbers. Every value is checked against its field's type (int: a whole number,
not a bool; float: a finite number; str; bool; a list of these) and its range in two places that share
`check_range`: the flag's argparse type (`cli/options.py`), and the dataclass's construction (`Checked`)
or `check_fields` for values read from a file (the figures' `--config`), so a flag, a settings file and a
Python caller meet the same check, in one line that names the setting, the value, the range and a fix,
before anything is loaded. Lengths and counts have ceilings (MAX_TOKENS, MAX_COUNT), so that a typo
(an extra digit, 1e20) is refused instead of growing a prompt or an index array without bound.

`Recorded` gives a config its `to_dict()`, every field as results files and checkpoints record it, and
its `cache_key()`, the versioned record of what changes its numbers, that names a cached run (the figures'
cache). `first_difference` names the first setting in which two records differ (a checkpoint and this
run, two ranks of one launch): every refusal of "other flags" says which, and a setting a file written
before it lacks reads as its default there.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import os
import shlex
import textwrap
import types
import typing
from dataclasses import MISSING
from typing import Any

from entropy_lens.errors import EntropyLensError

__all__ = [
    "MAX_COUNT",
    "MAX_SEED",
    "MAX_TOKENS",
    "PASSKEY_MOST",
    "SCALE",
    "SETTING",
    "Checked",
    "Recorded",
    "check_argument",
    "check_fields",
    "check_range",
    "check_value",
    "command_words",
    "documented",
    "field_default",
    "first_difference",
    "range_words",
    "setting",
]

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
            spec, flag = f.metadata[SETTING], f.metadata[SETTING]["flag"] or "--" + f.name.replace("_", "-")
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


def check_range(
    value, *, label: str, at_least=None, above=None, at_most=None, fix: typing.Callable | None = None
) -> None:
    """EntropyLensError unless `value` lies in the range, in one line: '--samples must be at least 1 and
    at most 16777216 (got 0); pass --samples 1 or another value in that range'. `fix(nearest)` words the suggestion
    (default: 'pass {label} {nearest}')."""
    if (
        (at_least is None or value >= at_least)
        and (above is None or value > above)
        and (at_most is None or value <= at_most)
    ):
        return
    words = range_words(at_least=at_least, above=above, at_most=at_most)
    nearest = at_most if at_most is not None and value > at_most else at_least
    if nearest is None:
        suggestion = "pass a value in that range"
    else:
        suggestion = (fix or (lambda v: f"pass {label} {v}"))(nearest) + " or another value in that range"
    raise EntropyLensError(f"{label} must be {words} (got {_quoted(value)}); {suggestion}")


class Checked:
    """A settings dataclass that checks its fields when it is made (and by `dataclasses.replace`): each
    value against its field's type and declared range (`check_fields`). A subclass with its own
    __post_init__ calls this one first."""

    def __post_init__(self) -> None:
        check_fields(type(self), {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


class Recorded:
    """`to_dict()`: every field, as results files and checkpoints record them (a file written before a
    field existed lacks it; `first_difference` reads it as its default).

    `cache_key()`: what a cached run is found by (figures/cache.py), {"v": KEY_VERSION, **the KEY
    fields}. The rule: KEY holds every field that changes the numbers a run writes (the model and how it
    is loaded, the text, the lengths, the scales, what is recorded); NOT_KEY the fields that change only
    how they are computed (kernel, batching, sharding, memory), equal up to float rounding, so a cached
    run serves them all. Settings that are no field (--out, --progress, --quiet, --threads,
    --dist-timeout) are in neither. Every field is in exactly one (a test checks). A new field that
    changes numbers joins KEY and bumps KEY_VERSION: every cached run of that config is computed again
    (or, where the field's default gives the old numbers, renamed once to its new key); a new field in
    NOT_KEY leaves the key as it is."""

    KEY_VERSION: typing.ClassVar[int] = 1
    KEY: typing.ClassVar[tuple[str, ...]] = ()
    NOT_KEY: typing.ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict:
        """The fields as a plain dict (what a results file records of the config)."""
        return dataclasses.asdict(self)

    def cache_key(self) -> dict:
        """The fields that decide the numbers (`KEY`) and the key's version: what names a cached run."""
        d = self.to_dict()
        return {"v": self.KEY_VERSION, **{name: d[name] for name in self.KEY}}


def check_fields(cls, values: typing.Mapping[str, Any], *, where: str | None = None) -> None:
    """EntropyLensError, in one line, for the first of `values` ({field name: value}; names that are not
    fields of `cls` are skipped) that is not of its field's type or lies outside its declared range.
    Named by its flag ('--samples'), or with `where` (a settings file) as 'where: samples', and the fix
    worded for that place."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = _hints(cls)
    for name, value in values.items():
        if name not in fields:
            continue
        spec = fields[name].metadata.get(SETTING) or {}
        flag = spec.get("flag") or "--" + name.replace("_", "-")
        if where is None and flag.startswith("-") and spec.get("cli"):  # a flag: named as it is typed
            label, fix = flag, lambda v, flag=flag: f"pass {flag} {_shown(v, ' ')}"
        else:
            label = f"{where}: {name}" if where else name
            fix = lambda v, name=name: f"write {name}: {_shown(v, ', ')}"
        check_value(value, hints.get(name), spec, label=label, fix=fix, example=field_default(fields[name]))


def check_argument(name: str, value, kind, spec: dict, *, example=MISSING) -> None:
    """A Python keyword argument against the type `kind` (int, float, ...) and the range `spec` its flag
    declares (SCALE, a statistic's `Parameter.spec`), by `check_value`: EntropyLensError in one line named as the caller
    writes it, 'samples must be a whole number (got 2.9); pass samples=8'."""
    check_value(value, kind, spec, label=name, fix=lambda v: f"pass {name}={v}", example=example)


def check_value(value, hint, spec: dict, *, label: str, fix: typing.Callable, example=MISSING) -> None:
    """`value` against the type hint (None allowed where the hint says `| None`; a list or tuple hint
    checks each element) and the range of a setting's `spec` (its metadata); EntropyLensError in one
    line; for a value of the wrong type the suggestion is `fix(example)` (the setting's default), or
    to leave it out where the default is None."""
    optional, switch, container, kind = _shape(hint)
    if (value is None and optional) or (switch and isinstance(value, bool)):
        return  # None where allowed; a switch's own True/False (`bool | int`) has no range
    words = f"a list of {_PLURAL.get(kind, 'values')}" if container is not None else _WORDS.get(kind)
    if switch:
        words = f"true, false or {words}"
    if example is None:
        shown = "leave it out for the default"
    elif example is MISSING or kind is bool or isinstance(example, bool):
        shown = f"give {words}"
    else:
        shown = fix(example)
    if container is not None:
        if not isinstance(value, (list, tuple)) or not all(_is(v, kind) for v in value):
            raise EntropyLensError(f"{label} must be {words} (got {_quoted(value)}); {shown}")
        items = value
    elif not _is(value, kind):
        raise EntropyLensError(f"{label} must be {words} (got {_quoted(value)}); {shown}")
    else:
        items = [value]
    bounds = {k: spec.get(k) for k in ("at_least", "above", "at_most")}
    for item in items:
        check_range(item, label=label, fix=fix, **bounds)


_WORDS = {bool: "true or false", int: "a whole number", float: "a finite number", str: "text"}
_PLURAL = {bool: "true or false values", int: "whole numbers", float: "finite numbers", str: "texts"}


def _is(value, kind) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if kind is str:
        return isinstance(value, (str, os.PathLike))
    return True  # a type no check is written for


def _shape(hint) -> tuple[bool, bool, type | None, Any]:
    """(None allowed, True/False allowed beside another type (`bool | int`: a switch that may take a
    value), list/tuple or None, the value's or each element's type) of a field's type hint."""
    optional = switch = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        rest = [a for a in args if a is not type(None)]
        optional = len(rest) < len(args)
        switch = bool in rest and len(rest) == 2
        rest = [a for a in rest if a is not bool] if switch else rest
        hint = rest[0] if len(rest) == 1 else None
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return optional, switch, origin, typing.get_args(hint)[0]
    return optional, switch, None, hint


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def field_default(field: dataclasses.Field):
    """A dataclass field's default (its factory's value), or MISSING for a required field."""
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    return MISSING


def _shown(value, sep: str) -> str:
    """A value as a flag (sep ' ': '128 256') or a settings file (sep ', ': '[128, 256]') writes it."""
    if isinstance(value, (list, tuple)):
        joined = sep.join(map(str, value))
        return joined if sep == " " else f"[{joined}]"
    return str(value)


def _quoted(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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


def first_difference(
    ours: typing.Mapping,
    theirs: typing.Mapping,
    *,
    cls=None,
    labels: typing.Mapping[str, str] | None = None,
    names: tuple[str, str] = ("here", "there"),
) -> str | None:
    """The first key (in `ours`' order, then `theirs`') whose value differs between two records (a config's
    `to_dict()`, or a run's identity that holds one), as "--seed (1 here, 0 there)" (`names`: how to call
    the two records); None when they are equal. Nested records are compared key by key; a field of the
    settings dataclass `cls` is named by its flag (a missing field, as in a file written before it, reads as
    its default), any other key by `labels` or itself."""
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls is not None else {}
    for key in [*ours, *(k for k in theirs if k not in ours)]:
        default = field_default(fields[key]) if key in fields else MISSING
        mine, other = ours.get(key, default), theirs.get(key, default)
        if isinstance(mine, typing.Mapping) and isinstance(other, typing.Mapping):
            found = first_difference(mine, other, cls=cls, labels=labels, names=names)
            if found is not None:
                return found
        elif _plain(mine) != _plain(other):
            name = (labels or {}).get(key, key)
            if key in fields:
                spec = fields[key].metadata.get(SETTING) or {}
                flag = spec.get("flag") or "--" + key.replace("_", "-")
                name = flag if flag.startswith("-") else spec.get("metavar") or flag
            return f"{name} ({_worded(mine)} {names[0]}, {_worded(other)} {names[1]})"
    return None


def _plain(value):
    """A value as JSON gives it back (tuples as lists), so a record read from a file equals its source."""
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _worded(value) -> str:
    return "absent" if value is MISSING else _quoted(value)
