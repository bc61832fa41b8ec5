"""Checking a value against its setting: its field's type (int: a whole number, not a bool; float: a
finite number; str; bool; a list of these) and declared range, in one line that names the setting, the
value, the range and a fix (the package docstring says where each check runs)."""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import types
import typing
from dataclasses import MISSING
from typing import Any

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings.declare import SETTING, field_default, flag_of, range_words


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
    raise EntropyLensError(f"{label} must be {words} (got {quoted(value)}); {suggestion}")


class Checked:
    """A settings dataclass that checks its fields when it is made (and by `dataclasses.replace`): each
    value against its field's type and declared range (`check_fields`). A subclass with its own
    __post_init__ calls this one first."""

    def __post_init__(self) -> None:
        check_fields(type(self), {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


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
        flag = flag_of(name, spec)
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
            raise EntropyLensError(f"{label} must be {words} (got {quoted(value)}); {shown}")
        items = value
    elif not _is(value, kind):
        raise EntropyLensError(f"{label} must be {words} (got {quoted(value)}); {shown}")
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


def _shown(value, sep: str) -> str:
    """A value as a flag (sep ' ': '128 256') or a settings file (sep ', ': '[128, 256]') writes it."""
    if isinstance(value, (list, tuple)):
        joined = sep.join(map(str, value))
        return joined if sep == " " else f"[{joined}]"
    return str(value)


def quoted(value) -> str:
    """repr(value), cut to 40 characters: a value as a one-line message shows it."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
