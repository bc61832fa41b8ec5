"""A config as results files, checkpoints and the figures' cache record it (`Recorded`), and two such
records compared (`first_difference`: the first setting in which they differ, named by its flag)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import MISSING

from entropy_lens.settings.check import quoted
from entropy_lens.settings.declare import SETTING, field_default, flag_of


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
                flag = flag_of(key, spec)
                name = flag if flag.startswith("-") else spec.get("metavar") or flag
            return f"{name} ({_worded(mine)} {names[0]}, {_worded(other)} {names[1]})"
    return None


def _plain(value):
    """A value as JSON gives it back (tuples as lists), so a record read from a file equals its source."""
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _worded(value) -> str:
    return "absent" if value is MISSING else quoted(value)
