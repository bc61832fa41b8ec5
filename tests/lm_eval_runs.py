"""Helpers of the lm-evaluation-harness tests (test_harness*.py): the offline task folder and one call of
lm-eval's evaluator that keeps every request's response."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HARNESS_TASKS = Path(__file__).parent / "harness_tasks"  # task YAMLs over local JSON (make_data.py)
TASKS = ("el_next_sentence", "el_rolling", "el_generate")  # multiple choice, rolling perplexity, generation


def run_tasks(lm, tasks=TASKS, *, limit: int | None = None, include=HARNESS_TASKS, metadata=None) -> dict:
    """lm-eval's results of `lm` on `tasks` (with "samples"), no bootstrap."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    # only the folder's tasks: indexing lm-eval's own ~15,000 takes seconds per call
    manager = TaskManager(include_path=[str(include)], include_defaults=False, metadata=metadata)
    return lm_eval.simple_evaluate(
        model=lm, tasks=list(tasks), task_manager=manager, limit=limit, log_samples=True, bootstrap_iters=0
    )


def harness_args(model_args: str, *more: str) -> list[str]:
    """lm-eval's command-line arguments for the registered model under `model_args` on the folder's
    multiple-choice task, then `more`."""
    args = ["--model", "entropy-lens", "--model_args", model_args, "--tasks", "el_next_sentence"]
    return [*args, "--include_path", str(HARNESS_TASKS), *more]


def harness_command(model_args: str, output: Path, *more: str, env=None) -> subprocess.CompletedProcess:
    """`python -m entropy_lens.harness` (lm-eval's own CLI with the model registered) in a child: the
    model under `model_args`, the folder's multiple-choice task, `more` arguments, results to `output`;
    `env` added to this process's environment (the package importable from the checkout)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "entropy_lens.harness",
            *harness_args(model_args, *more, "--output_path", str(output)),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), **(env or {})},
        timeout=300,
        check=False,
    )


def responses(results: dict, task: str) -> list:
    """Each document's raw responses, in document order: loglikelihoods (float, is_greedy) or generations."""
    samples = sorted(results["samples"][task], key=lambda s: s["doc_id"])
    return [s["resps"] for s in samples]


def loglikelihoods(results: dict, task: str) -> list[float]:
    """Every loglikelihood of a loglikelihood or rolling task, flat, in document order."""
    out = []
    for doc in responses(results, task):
        for resp in doc:
            value = resp[0]
            out.append(float(value[0] if isinstance(value, (list, tuple)) else value))
    return out
