"""Helpers of the lm-evaluation-harness tests (test_harness*.py): the offline task folder and one call of
lm-eval's evaluator that keeps every request's response."""

from __future__ import annotations

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
