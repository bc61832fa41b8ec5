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

The package's modules, one job each (this module hands on their names):

- `declare.py`: declaring a setting (`setting`, `documented`, the ranges and ceilings, `field_default`);
- `check.py`: checking a value against its setting (`check_range`, `check_value`, `check_fields`,
  `check_argument`, `Checked`);
- `record.py`: a config as recorded (`Recorded`) and two records compared (`first_difference`);
- `command.py`: the command line that rebuilds a config (`command_words`).
"""

from entropy_lens.settings.check import Checked, check_argument, check_fields, check_range, check_value
from entropy_lens.settings.command import command_words
from entropy_lens.settings.declare import (
    MAX_COUNT,
    MAX_SEED,
    MAX_TOKENS,
    PASSKEY_MOST,
    SCALE,
    SETTING,
    documented,
    field_default,
    range_words,
    setting,
)
from entropy_lens.settings.record import Recorded, first_difference

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
