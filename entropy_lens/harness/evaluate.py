"""evaluate(config, out=F): lm-eval's evaluator over a checkpoint and its variant, lm-eval's results JSON
with the toolkit's provenance.

    config.check()              every flag, before anything is loaded (harness/config.py): --metadata's
                                and --gen-kwargs' values typed and range-checked
    outputs                     `out`, and <out stem>.samples.json with --log-samples: each refused where
                                it exists, without --force
    check_task_folder           every YAML of --include-path parses (lm-eval skips one that does not in
                                silence, and its task is then "unknown")
    task_manager                lm-eval's tasks + the package's (harness/tasks/) + --include-path, the
                                model's arguments and --metadata as the tasks' metadata (as lm-eval's CLI);
                                the package's alone where they hold every task asked for
    check_tasks                 unknown names refused, with the closest known ones
    EntropyLensLM.from_config   the model (harness/model.py); passkey windows it would cut refused
    lm_eval.simple_evaluate     lm-eval's own evaluation, unchanged
    write                       `out` (atomically): lm-eval's results dict, whose "config" names the
                                model as lm-eval's CLI would (model "entropy-lens", its model_args), plus
                                "entropy_lens": provenance (versions, git hash, time), the eval config,
                                the model's facts (runs/variants.py) and the attention paths that ran;
                                with --log-samples, lm-eval's per-request records in <out stem>.samples.json

`entropy-lens eval` and notebooks call this; `lm_eval --model entropy-lens` (python -m entropy_lens.harness)
is the other way in, with lm-eval's own flags.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import time
from pathlib import Path

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.harness import TASKS_DIR
from entropy_lens.harness.config import EvalConfig, require_lm_eval
from entropy_lens.progress import every_bar_off
from entropy_lens.results import atomic_write_text
from entropy_lens.runs.lock import OutputLock
from entropy_lens.runs.output import check_file_target, save_or_rescue
from entropy_lens.runs.provenance import provenance, recorded_settings

__all__ = ["EVAL_KIND", "check_task_folder", "evaluate", "quiet_output", "samples_path"]

EVAL_KIND = "entropy_lens.eval"  # results["entropy_lens"]["kind"]


def samples_path(out: str | Path) -> Path:
    """Where --log-samples writes lm-eval's per-request records beside `out`."""
    return Path(out).with_suffix(".samples.json")


def evaluate(
    config: EvalConfig, *, out: str | Path | None = None, force: bool = False, progress: bool = True
) -> dict:
    """lm-eval's results dict for `config` (module docstring); written to `out` when given."""
    config.check()
    require_lm_eval()
    path = None if out is None else check_file_target(out, example="results.json")
    targets = [path] if path is not None else []
    if path is not None and config.log_samples:
        targets.append(samples_path(path))
        if targets[-1].is_dir():
            raise EntropyLensError(
                f"{targets[-1]} is a folder, where --log-samples would write lm-eval's samples beside --out; "
                "pass another --out"
            )
    for target in targets:
        if target.exists() and not force:
            raise EntropyLensError(f"{target} already exists; pass --force to overwrite it, or another --out")
    if config.include_path is not None:
        check_task_folder(Path(config.include_path))
    with OutputLock(path) if path is not None else contextlib.nullcontext(), quiet_output(not progress):
        import lm_eval

        from entropy_lens.harness.model import MODEL_NAME, EntropyLensLM

        model_config = config.model_config()
        model_args = model_config.model_args()
        tasks = task_manager(
            config.task_names(), config.include_path, metadata={**model_args, **config.task_metadata()}
        )
        check_tasks(config.task_names(), tasks.all_tasks)
        lm = EntropyLensLM.from_config(model_config, batch_size=config.batch_size)
        check_passkey_lengths(config.task_names(), lm.max_length)
        started = time.perf_counter()
        try:
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=config.task_names(),
                num_fewshot=config.num_fewshot,
                limit=config.limit,
                task_manager=tasks,
                log_samples=config.log_samples,
                bootstrap_iters=config.bootstrap_iters,
                gen_kwargs=config.generation(),
                random_seed=config.seed,
            )
        except ConnectionError as err:  # `datasets` raises the built-in one for a dataset it cannot reach
            raise EntropyLensError(
                f"a task's dataset is not on this machine and cannot be downloaded ({first_line(err)}); "
                "fetch it once where the Hub is reachable (HF_DATASETS_CACHE), or run the package's passkey "
                "tasks (entropy_lens_passkey_<W>), which need no download"
            ) from None
        samples = results.pop("samples", None)
        facts = lm.variant.facts(path)  # the checkpoint and a --head-scales file named from `out`
        results["config"].update(model=MODEL_NAME, model_args=model_args, batch_size=config.batch_size)
        if "entropy_lens_model" in results["config"]:  # get_model_info's, written before `out` was known
            results["config"]["entropy_lens_model"] = facts
        results["entropy_lens"] = {
            "kind": EVAL_KIND,
            **provenance(),
            "lm_eval_version": lm_eval.__version__,
            "eval_config": recorded_settings(config.to_dict(), path),  # a --head-scales file named from `out`
            "model": facts,
            "attention_path": "+".join(sorted(lm.attention_paths)) or "none",  # capture/paths.py's names
            "wall_time_s": round(time.perf_counter() - started, 3),
        }
        if path is not None:
            _write(path, results, what="lm-eval results")
            if samples is not None:
                _write(samples_path(path), samples, what="lm-eval samples")
    return results


def task_manager(names: list[str], include_path: str | Path | None, *, metadata: dict):
    """lm-eval's TaskManager for `names`: the package's tasks (harness/tasks/) alone where every name is
    one of them and no --include-path is given, else lm-eval's own tasks, the package's and the
    --include-path folder's. An evaluation of the package's passkey tasks does not need lm-eval's index
    of its own thousands of task YAMLs, the longest part of its start."""
    from lm_eval.tasks import TaskManager

    if include_path is None:
        own = TaskManager(include_path=[str(TASKS_DIR)], include_defaults=False, metadata=metadata)
        if all(name in own.all_tasks for name in names):
            return own
    paths = [str(TASKS_DIR), *([str(Path(include_path).resolve())] if include_path else [])]
    return TaskManager(include_path=paths, metadata=metadata)


def check_tasks(names: list[str], known: list[str]) -> None:
    """EntropyLensError naming each task lm-eval does not know, the closest known names and the fix."""
    unknown = [name for name in names if name not in known]
    if not unknown:
        return
    close = sorted({m for name in unknown for m in difflib.get_close_matches(name, known, n=3, cutoff=0.6)})
    hint = f" (close: {', '.join(close)})" if close else ""
    raise EntropyLensError(
        f"lm-eval knows no task {', '.join(unknown)}{hint}; check `lm_eval ls tasks`, or pass --include-path "
        "DIR with the folder of your task's YAML"
    )


def check_task_folder(folder: Path) -> None:
    """EntropyLensError, in one line naming the file and the YAML error, for a task YAML under `folder`
    that does not parse: lm-eval's index skips such a file without a word, and its task is then
    "unknown". Syntax only: lm-eval's tags (`!function`) are read as text, nothing is imported."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    for file in sorted(folder.rglob("*.yaml")):
        if "__pycache__" in file.parts or ".ipynb_checkpoints" in file.parts:
            continue  # as lm-eval's index
        try:
            yaml.load(file.read_text(encoding="utf-8"), Loader=Loader)  # a SafeLoader: plain data only
        except (yaml.YAMLError, OSError, UnicodeDecodeError) as err:
            raise EntropyLensError(
                f"--include-path: {file} is not valid YAML ({_one_line(err)}); fix the file, or move it out "
                "of the folder"
            ) from None


def _one_line(err: BaseException) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return " ".join(str(err).split())


def check_passkey_lengths(names: list[str], max_length: int) -> None:
    """EntropyLensError for a passkey task whose windows the model would cut (lm-eval left-truncates
    contexts to its max_length): the prompts would lose their start, needle and instruction first."""
    from entropy_lens.harness.passkey import passkey_length

    too_long = [(name, w) for name in names if (w := passkey_length(name)) is not None and w > max_length]
    if too_long:
        longest = max(w for _, w in too_long)
        raise EntropyLensError(
            f"{', '.join(name for name, _ in too_long)} needs {longest}-token inputs but the model takes "
            f"{max_length} (its declared length), and lm-eval would cut the prompts; pass --max-length {longest}"
        )


def _write(path: Path, value, *, what: str) -> None:
    from lm_eval.utils import handle_non_serializable

    text = json.dumps(value, indent=2, default=handle_non_serializable, ensure_ascii=False) + "\n"
    save_or_rescue(path, lambda p: atomic_write_text(p, text), what=what)


@contextlib.contextmanager
def quiet_output(quiet: bool = True):
    """While it lasts (where `quiet`): every progress bar made disabled (progress.every_bar_off: lm-eval
    passes `disable=` to each bar itself; transformers' and datasets' bars are tqdm's too), and lm-eval's
    log below errors."""
    if not quiet:
        yield
        return
    log = logging.getLogger("lm_eval")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with every_bar_off():
            yield
    finally:
        log.setLevel(level)
