"""The settings of the lm-eval model and of `entropy-lens eval`, each declared once (settings.setting).

    HarnessModelConfig  the checkpoint and its variant, exactly as `scan` takes them (runs/configs.py's
                        Checkpoint + Loading + Scaling: --nope, --scale, --head-scales, --scale-schedule,
                        --rope-scaling, --train-len, --dtype, --device, --revision,
                        --trust-remote-code) + max_length; lm-eval's `--model_args` name the same fields
                        (`pretrained` for the checkpoint, as lm-eval's own models)
    EvalConfig          + what lm-eval runs: tasks, include_path, limit, num_fewshot, batch_size, ...

No torch and no lm_eval at import: `entropy-lens --help` builds the flags from here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.configs import Checkpoint, Loading, Scaling
from entropy_lens.settings import MAX_COUNT, MAX_SEED, MAX_TOKENS, Checked, Recorded, setting

__all__ = ["INSTALL", "EvalConfig", "HarnessModelConfig", "require_lm_eval"]

# the one line that says how to get lm-eval, wherever it is missing
INSTALL = "pip install 'entropy-lens[eval]' (lm-evaluation-harness; in a checkout: pip install -e '.[eval]')"


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
        the number 1); EntropyLensError for a name that is not a setting, naming the settings and `also`
        (the other arguments the caller takes)."""
        args = dict(args)
        if "pretrained" not in args:
            raise EntropyLensError(
                "the entropy-lens model needs a checkpoint: pass --model_args pretrained=CKPT"
            )
        args["model"] = str(args.pop("pretrained"))
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - set(fields))
        if unknown:
            raise EntropyLensError(
                f"the entropy-lens model takes no argument {', '.join(unknown)}; its arguments: "
                + ", ".join(["pretrained", *sorted(set(fields) - {"model"}), *also])
            )
        return cls(**{name: _as_field_type(fields[name], value) for name, value in args.items()})


def _as_field_type(field: dataclasses.Field, value):
    """lm-eval parses "1.0" as 1.0 and "1" as 1: a whole number for a float setting becomes a float; a
    number for a text setting (a --revision like 1234) becomes text. Anything else is checked as given."""
    kind = str(field.type)
    if isinstance(value, int) and not isinstance(value, bool) and kind.startswith("float"):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and kind.startswith("str"):
        return str(value)
    return value


@dataclass(frozen=True, kw_only=True)
class EvalConfig(HarnessModelConfig):
    """Everything that determines an `entropy-lens eval` run: the model's settings and lm-eval's."""

    tasks: str = setting(
        metavar="T1,T2",
        help="lm-eval task (or group) names, comma-separated: its own (hellaswag, longbench_narrativeqa, ...), "
        "the passkey tasks shipped with this package (entropy_lens_passkey_<len>), or those of --include-path",
    )
    include_path: str | None = setting(
        None, metavar="DIR", help="a folder of lm-eval task YAML files to add to lm-eval's own tasks"
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

    def task_names(self) -> list[str]:
        return [name.strip() for name in self.tasks.split(",") if name.strip()]

    def task_metadata(self) -> dict:
        """--metadata as a dict (EntropyLensError for anything but a JSON object)."""
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
        return value

    def model_config(self) -> HarnessModelConfig:
        names = {f.name for f in dataclasses.fields(HarnessModelConfig)}
        return HarnessModelConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})
