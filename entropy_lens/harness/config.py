"""The settings of the lm-eval model and of `entropy-lens eval`, each declared once (settings.setting).

    HarnessModelConfig  the checkpoint and its variant, exactly as `scan` takes them (runs/configs.py's
                        Checkpoint + Loading + Scaling: --nope, --scale, --head-scales, --scale-schedule,
                        --rope-scaling, --train-len, --dtype, --device, --revision,
                        --trust-remote-code) + max_length; lm-eval's `--model_args` name the same fields
                        (`pretrained` for the checkpoint, as lm-eval's own models)
    EvalConfig          + what lm-eval runs: tasks, include_path, limit, num_fewshot, batch_size, ...

Every value the harness reads from outside a flag is typed here, in one place, before a model loads:
`parse_bool` for each boolean (true/false/1/0/yes/no, never Python's truthiness: bool("false") is True),
`task_metadata_values` for the task metadata this package's tasks read (--metadata, or lm-eval's
metadata: its model_args and --metadata), `generation_settings` for --gen-kwargs.

No torch and no lm_eval at import: `entropy-lens --help` builds the flags from here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.configs import Checkpoint, Loading, PasskeyConfig, Scaling
from entropy_lens.settings import (
    MAX_COUNT,
    MAX_SEED,
    MAX_TOKENS,
    SETTING,
    Checked,
    Recorded,
    check_range,
    check_value,
    field_default,
    setting,
)

__all__ = [
    "INSTALL",
    "EvalConfig",
    "HarnessModelConfig",
    "generation_settings",
    "parse_bool",
    "require_lm_eval",
    "task_metadata_values",
]

# the one line that says how to get lm-eval, wherever it is missing
INSTALL = "pip install 'entropy-lens[eval]' (lm-evaluation-harness; in a checkout: pip install -e '.[eval]')"


BOOLEAN_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def parse_bool(value, *, name: str) -> bool:
    """A boolean read from JSON, lm-eval's --model_args or the command line: True or False, 1 or 0, or the
    text true/false/1/0/yes/no in any case; EntropyLensError, in one line naming `name`, for anything
    else. Never Python's truthiness, by which "false" and "no" are True."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in BOOLEAN_WORDS:
        return BOOLEAN_WORDS[value.strip().lower()]
    raise EntropyLensError(
        f"{name} must be true or false (or 1/0, yes/no, in any case), not {_short(value)}; give true or false"
    )


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def require_lm_eval() -> None:
    """EntropyLensError, in one line saying how to install it, where lm-eval cannot be imported."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise EntropyLensError(f"`entropy-lens eval` needs lm-evaluation-harness: {INSTALL}") from None


@dataclass(frozen=True, kw_only=True)
class HarnessModelConfig(Checked, Recorded, Checkpoint, Loading, Scaling):
    """A checkpoint and its variant as an lm-eval model (harness/model.py)."""

    max_length: int | None = setting(
        None,
        at_least=2,
        at_most=MAX_TOKENS,
        help="the longest input lm-eval gives the model, in tokens: longer contexts are cut on the left and "
        "loglikelihood_rolling scores windows this long (default: what the checkpoint declares, as lm-eval's "
        "hf model; give it to evaluate beyond the training length, e.g. passkey windows)",
    )

    def check(self) -> None:
        self.check_scaling()

    def model_args(self) -> dict:
        """The settings as lm-eval's `--model_args` of `--model entropy-lens` write them (`pretrained` for
        the checkpoint), the ones left at their default left out."""
        args = {"pretrained": self.model}
        for field in dataclasses.fields(HarnessModelConfig):
            value = getattr(self, field.name)
            if field.name != "model" and value != field.default:
                args[field.name] = value
        return args

    @classmethod
    def from_model_args(cls, args: dict, *, also: tuple[str, ...] = ()) -> HarnessModelConfig:
        """The config of lm-eval's model arguments ({name: value}, values as lm-eval parsed them: "1" is
        the number 1, "-5" is -5.0); EntropyLensError for a name that is not a setting, naming the
        settings and `also` (the other arguments the caller takes), and for a value of the wrong type
        or out of range, named as the argument it is (`max_length`, not --max-length)."""
        args = dict(args)
        if args.get("pretrained") is None:
            raise EntropyLensError(
                "the entropy-lens model needs a checkpoint: pass --model_args pretrained=CKPT "
                "(a bundled name such as tiny-nope, a folder, a .gguf file or a Hub id)"
            )
        args["model"] = str(args.pop("pretrained"))
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - set(fields))
        if unknown:
            raise EntropyLensError(
                f"the entropy-lens model takes no argument {', '.join(unknown)}; its arguments: "
                + ", ".join(["pretrained", *sorted(set(fields) - {"model"}), *also])
            )
        hints = typing.get_type_hints(cls)
        values = {}
        for name, value in args.items():
            field, shown = fields[name], "pretrained" if name == "model" else name
            value = as_setting_type(hints[name], value, name=f"--model_args {shown}")
            check_value(
                value,
                hints[name],
                field.metadata.get(SETTING) or {},
                label=f"--model_args {shown}",
                fix=lambda v, shown=shown: f"pass {shown}={v}",
                example=field_default(field),
            )
            values[name] = value
        return cls(**values)


def as_setting_type(hint, value, *, name: str):
    """A value lm-eval or JSON parsed, as the setting of type `hint` takes it: a boolean by `parse_bool`
    (named `name`); a whole number for an int (lm-eval parses "-5" as -5.0); a number for a float; text
    for a text setting (a revision like 1234). None stays None; anything else is left to the setting's
    check, which refuses it in one line."""
    kinds = set(typing.get_args(hint)) or {hint}
    if value is None:
        return value
    if bool in kinds and len(kinds - {type(None)}) == 1:
        return parse_bool(value, name=name)
    if isinstance(value, bool):
        return value
    if int in kinds and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if float in kinds and isinstance(value, int):
        return float(value)
    if str in kinds and isinstance(value, (int, float)):
        return str(value)
    return value


# the task metadata this package's tasks read (harness/passkey.py), each typed and checked before any load
PASSKEY_METADATA = {"passkey_depths": "depths", "passkey_keys": "keys", "passkey_seed": "seed"}


def task_metadata_values(metadata: dict, *, where: str = "--metadata") -> dict:
    """`metadata` with the values this package's tasks read typed and checked, each named as a key of
    `where`: trust_remote_code by `parse_bool`; passkey_depths, passkey_keys and passkey_seed as
    `entropy-lens passkey`'s --depths, --keys and --seed (types and ranges). Other keys pass unchanged."""
    out = dict(metadata)
    if out.get("trust_remote_code") is not None:
        out["trust_remote_code"] = parse_bool(out["trust_remote_code"], name=f"{where} trust_remote_code")
    fields = {f.name: f for f in dataclasses.fields(PasskeyConfig)}
    hints = typing.get_type_hints(PasskeyConfig)
    for key, name in PASSKEY_METADATA.items():
        if out.get(key) is None:
            continue
        value = as_setting_type(hints[name], out[key], name=f"{where} {key}")
        check_value(
            value,
            hints[name],
            fields[name].metadata.get(SETTING) or {},
            label=f"{where} {key}",
            fix=lambda v, key=key: f'write "{key}": {v}',
            example=field_default(fields[name]),
        )
        out[key] = value
    return out


# --gen-kwargs keys whose type lm-eval does not check (transformers' generate fails on them, after the
# model has loaded): (type, at least, at most)
GENERATION_TYPES = {
    "num_beams": (int, 1, MAX_COUNT),
    "max_gen_toks": (int, 1, MAX_TOKENS),
    "max_new_tokens": (int, 1, MAX_TOKENS),
    "min_new_tokens": (int, 0, MAX_TOKENS),
    "top_k": (int, 0, None),
    "no_repeat_ngram_size": (int, 0, None),
    "num_beam_groups": (int, 1, MAX_COUNT),
    "temperature": (float, 0, None),
    "top_p": (float, 0, 1),
    "typical_p": (float, 0, 1),
    "min_p": (float, 0, 1),
    "repetition_penalty": (float, 0, None),
    "length_penalty": (float, None, None),
    "do_sample": (bool, None, None),
}


def generation_settings(text: str | None) -> dict | None:
    """--gen-kwargs K=V,... as the dict lm-eval passes to generation: the keys of GENERATION_TYPES typed
    and range-checked (a boolean by `parse_bool`), others as lm-eval reads them (true/false, a number,
    else text); EntropyLensError, in one line, for a part without "=" or a value of the wrong type."""
    if text is None or not text.strip():
        return None
    out = {}
    for part in (p for p in text.split(",") if p.strip()):
        key, eq, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq or not key:
            raise EntropyLensError(
                f"--gen-kwargs {part.strip()!r} is not KEY=VALUE; write e.g. --gen-kwargs num_beams=5,temperature=0"
            )
        label = f"--gen-kwargs {key}"
        kind, low, high = GENERATION_TYPES.get(key, (None, None, None))
        if kind is bool:
            out[key] = parse_bool(raw, name=label)
            continue
        if kind is None:
            out[key] = _lm_eval_value(raw)
            continue
        try:
            value = kind(raw)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):
            words = "a whole number" if kind is int else "a finite number"
            raise EntropyLensError(
                f"{label} must be {words} (got {raw!r}); e.g. --gen-kwargs {key}={max(low or 0, 1)}"
            )
        check_range(
            value,
            label=label,
            at_least=low,
            at_most=high,
            fix=lambda v, key=key: f"pass --gen-kwargs {key}={v}",
        )
        out[key] = value
    return out


def _lm_eval_value(raw: str):
    """A --gen-kwargs value as lm-eval's `handle_arg_string` reads it: true/false, none, a number, text."""
    lower = raw.lower()
    if lower in ("true", "false"):
        return lower == "true"
    if lower == "none":
        return None
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


@dataclass(frozen=True, kw_only=True)
class EvalConfig(HarnessModelConfig):
    """Everything that determines an `entropy-lens eval` run: the model's settings and lm-eval's."""

    tasks: str = setting(
        metavar="T1,T2",
        help="lm-eval task (or group) names, comma-separated: its own (hellaswag, longbench_narrativeqa, ...), "
        "the passkey tasks shipped with this package (entropy_lens_passkey_<len>), or those of --include-path",
    )
    include_path: str | None = setting(
        None,
        metavar="DIR",
        help="a folder of lm-eval task YAML files to add to lm-eval's own tasks. It runs code: lm-eval "
        "imports the Python its YAML names (`!function file.name`, lm-eval's design) when the tasks load, "
        "so pass only a folder you trust, as with --trust-remote-code for a model folder",
    )
    limit: int | None = setting(
        None, at_least=1, at_most=MAX_COUNT, metavar="N", help="evaluate the first N documents of each task"
    )
    num_fewshot: int | None = setting(
        None,
        at_least=0,
        at_most=MAX_COUNT,
        metavar="K",
        help="few-shot examples per prompt (default: the task's)",
    )
    batch_size: int = setting(1, at_least=1, at_most=MAX_COUNT, help="requests per forward pass")
    metadata: str | None = setting(
        None,
        metavar="JSON",
        help='lm-eval task metadata, a JSON object: the passkey tasks read {"passkey_depths": N, '
        '"passkey_keys": K, "passkey_seed": S} (default 10, 10, 42, as `entropy-lens passkey`)',
    )
    gen_kwargs: str | None = setting(
        None,
        metavar="K=V,...",
        help="lm-eval's generation settings for generate_until tasks, over the tasks' own, e.g. num_beams=5 "
        "(the paper's LongBench decoding)",
    )
    seed: int = setting(
        0,
        at_least=0,
        at_most=MAX_SEED,
        help="lm-eval's seeds (Python's random; numpy, torch and few-shot: 1234)",
    )
    bootstrap_iters: int = setting(
        100000,
        at_least=0,
        at_most=MAX_COUNT,
        help="lm-eval's bootstrap resamples for standard errors (0: none)",
    )
    log_samples: bool = setting(False, help="also write each request and response, to <out>.samples.json")

    def check(self) -> None:
        super().check()
        if not self.task_names():
            raise EntropyLensError("--tasks names no task; pass e.g. --tasks arc_easy,hellaswag")
        if self.include_path is not None and not Path(self.include_path).is_dir():
            raise EntropyLensError(
                f"--include-path {self.include_path} is not a folder; pass a folder of lm-eval task YAML files"
            )
        self.task_metadata()
        self.generation()

    def task_names(self) -> list[str]:
        return [name.strip() for name in self.tasks.split(",") if name.strip()]

    def task_metadata(self) -> dict:
        """--metadata as a dict, the keys this package's tasks read typed and checked
        (`task_metadata_values`); EntropyLensError for anything but a JSON object."""
        if self.metadata is None:
            return {}
        try:
            value = json.loads(self.metadata)
        except ValueError as err:
            raise EntropyLensError(
                f"--metadata is not JSON ({err}); pass an object, e.g. --metadata '{{\"passkey_keys\": 5}}'"
            ) from None
        if not isinstance(value, dict):
            raise EntropyLensError(
                f"--metadata must be a JSON object (got {type(value).__name__}); e.g. --metadata '{{\"passkey_keys\": 5}}'"
            )
        return task_metadata_values(value)

    def generation(self) -> dict | None:
        """--gen-kwargs as lm-eval's generation settings, typed and checked (`generation_settings`)."""
        return generation_settings(self.gen_kwargs)

    def model_config(self) -> HarnessModelConfig:
        names = {f.name for f in dataclasses.fields(HarnessModelConfig)}
        return HarnessModelConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})
