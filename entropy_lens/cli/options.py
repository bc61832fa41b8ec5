"""Flags generated from the settings' dataclasses (`entropy_lens.settings.setting`), and the one way back
from the parsed flags to a config.

    add_settings(parser, ScanConfig, exclusive=[("scale", "head_scales")])
    config = config_from_args(ScanConfig, args)          # every generated flag, by its field's name
    add_settings(parser, OutputSettings, ("out", "quiet"), required=("out",), helps={"out": "a JSON file"})

Each flag's dest is its field's name, its default the dataclass default (shown in the help), its type
the field's; a bool field is a switch, a `bool | int` field a switch that may take a number
(`--context-parallel` alone gives True, `--context-parallel 2` gives 2: nargs="?", the number's range
checked as it is parsed). `as_overrides=True` makes every default None ("not given"), for
flags that override a settings file. A command whose flag means something of its own gives its own
default (`defaults`, as the sweep's --record) and its own help line (`helps`, shown as given, so it
words that default itself): the output flags (`runs.output.OutputSettings`: --out, --resume, --force,
--quiet) are declared once, and each command says what its --out is.

The parser remembers which fields it generated (`args.settings_fields`), so `config_from_args` takes
exactly those: a field with no flag keeps its default or comes from `given`, and a flag can never be
dropped on the way.

A number's flag checks its value as it is parsed (`flag_type`): a finite number within its setting's
declared range (`settings.setting(at_least=, above=, at_most=)`, shown in the help), the same check the
dataclass makes when it is built (`settings.Checked`). A value outside it raises `FlagRejected` through
argparse, which `cli.main` prints as one line, as every input error.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import MISSING

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import SETTING, check_value, field_default, range_words

__all__ = ["FlagRejected", "add_settings", "config_from_args", "flag_type", "settings_from_args"]

BOUNDS = ("at_least", "above", "at_most")


class FlagRejected(Exception):
    """A flag's value that its type refused (outside its range, not finite): not a ValueError, so that
    argparse passes it on instead of rewording it as 'invalid int value'; `cli.main` prints it as one
    line and exits with status 2."""


def flag_type(
    kind: type, *, flag: str, check: typing.Callable | None = None, optional: bool = False, **bounds
):
    """The argparse type of a number's flag: `kind(text)` (argparse words a text that is no number),
    then the value checked as its setting's (`settings.check_value`: finite, within `bounds`, i.e.
    at_least/above/at_most) or by `check` (which raises EntropyLensError); FlagRejected with the
    one-line message otherwise. `optional`: the number may be left out (a `bool | int` switch), so a
    text that is no number was most likely the next argument: the message says so."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            if not optional:
                raise
            raise FlagRejected(
                f"{flag} takes an optional number, and {text!r} is none: put {flag} after the positional "
                f"arguments (it then stands alone), or give the number ({flag} 2)"
            ) from None
        try:
            check_value(value, kind, bounds, label=flag, fix=lambda v: f"pass {flag} {v}")
            if check is not None:
                check(value)
        except EntropyLensError as err:
            raise FlagRejected(str(err)) from None
        return value

    parse.__name__ = kind.__name__  # argparse's "invalid int value" and the option table name it
    return parse


FIELDS = "settings_fields"  # the parsed namespace's {class name: generated field names}


def add_settings(
    parser: argparse.ArgumentParser,
    cls,
    names: typing.Iterable[str] | None = None,
    *,
    exclude: typing.Iterable[str] = (),
    exclusive: typing.Iterable[tuple[str, ...]] = (),
    required: typing.Iterable[str] = (),
    as_overrides: bool = False,
    defaults: typing.Mapping[str, typing.Any] | None = None,
    helps: typing.Mapping[str, str] | None = None,
) -> list[str]:
    """Add a flag for each field of `cls` that has one (in `names`' order, or the class's with the
    required ones first; less `exclude`); fields in one `exclusive` tuple share a mutually exclusive group.
    `defaults` and `helps` ({field name: value}) replace a field's default and its whole help line on this
    command. Returns their names."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    chosen = [
        n
        for n in (names if names is not None else fields)
        if n not in set(exclude) and fields[n].metadata.get(SETTING, {}).get("cli")
    ]
    if names is None:  # the class's order, required ones (the checkpoint, the length) first
        chosen.sort(key=lambda n: field_default(fields[n]) is not MISSING)
    groups = {}
    for members in exclusive:
        group = parser.add_mutually_exclusive_group()
        groups.update(dict.fromkeys(members, group))
    defaults, helps = defaults or {}, helps or {}
    for name in chosen:
        spec = fields[name].metadata[SETTING]
        default = defaults[name] if name in defaults else field_default(fields[name])
        target = groups.get(name, parser)
        flag = spec["flag"] or "--" + name.replace("_", "-")
        kwargs = {"help": helps[name] if name in helps else _help(spec["help"], default, spec)}
        old = spec.get("aliases", ())
        if old:  # a renamed flag: its old names still work, and say so
            kwargs["help"] += f" [{', '.join(old)}: the old name, still accepted]"
        if spec["metavar"]:
            kwargs["metavar"] = spec["metavar"]
        if not flag.startswith("-"):  # positional
            target.add_argument(flag, **kwargs)
            continue
        kwargs["dest"] = name
        kind = _base_type(hints[name])
        if kind is not bool and bool in typing.get_args(hints[name]):  # bool | int: a switch or a number
            kwargs.update(nargs="?", const=True)
        if kind is bool and default is None:  # three states (--nope / --no-nope / neither): the checkpoint's
            kwargs.update(action=argparse.BooleanOptionalAction, default=None)
        elif kind is bool:
            kwargs.update(action="store_true", default=None if as_overrides else default)
        else:
            element = spec["type"] or kind  # a list's element type
            if element in (int, float):
                optional = kwargs.get("nargs") == "?"
                kwargs["type"] = flag_type(
                    element, flag=flag, optional=optional, **{k: spec.get(k) for k in BOUNDS}
                )
            elif element is not str:  # argparse's own default
                kwargs["type"] = element
            if spec["choices"]:
                kwargs["choices"] = list(spec["choices"])
            if spec["nargs"]:
                kwargs["nargs"] = spec["nargs"]
            if default is MISSING or name in set(required):
                kwargs["required"] = True
            else:
                kwargs["default"] = None if as_overrides else default
        target.add_argument(flag, *old, **kwargs)
    known = dict(parser.get_default(FIELDS) or {})
    known[cls.__name__] = [*known.get(cls.__name__, []), *chosen]
    parser.set_defaults(**{FIELDS: known})
    return chosen


def settings_from_args(cls, args: argparse.Namespace) -> dict:
    """{field name: parsed value} for every flag `add_settings` generated for `cls` on this parser."""
    names = getattr(args, FIELDS, {}).get(cls.__name__)
    if names is None:
        raise TypeError(
            f"the parser has no flags for {cls.__name__}: call add_settings(parser, {cls.__name__})"
        )
    return {name: getattr(args, name) for name in names}


def config_from_args(cls, args: argparse.Namespace, **given):
    """`cls` from its generated flags, with `given` for the fields that have none (or to replace them)."""
    return cls(**{**settings_from_args(cls, args), **given})


def _help(text: str, default, spec: dict) -> str:
    """The help text, then '(default 8; at least 1 and at most 16777216)' as far as there is a default and a range."""
    notes = []
    if not (default is MISSING or default is None or default is False):
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        notes.append(f"default {shown}")
    words = range_words(**{k: spec.get(k) for k in BOUNDS})
    if words:
        notes.append(words)
    return f"{text} ({'; '.join(notes)})" if notes else text


def _base_type(hint):
    """int for `int | None` and for `bool | int`, bool for `bool | None`, the element type's container for
    lists."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if len(args) == 2 and bool in args:
            args.remove(bool)
        return _base_type(args[0])
    return typing.get_origin(hint) or hint
