"""lm-evaluation-harness integration: every variant the toolkit applies as an lm-eval model, the passkey
task as lm-eval tasks, and `entropy-lens eval`.

    harness/config.py    HarnessModelConfig (the model's settings), EvalConfig (`entropy-lens eval`'s)
    harness/model.py     EntropyLensLM: lm-eval's HFLM over the toolkit's model, registered "entropy-lens"
    harness/evaluate.py  evaluate(config, out=...): lm-eval's evaluator on it, results JSON + provenance
    harness/passkey.py   the passkey trials as lm-eval documents (data/passkey.py's prompts)
    harness/tasks/       the task YAMLs shipped with the package (TASKS_DIR): entropy_lens_passkey_<len>
    python -m entropy_lens.harness ...   lm-eval's own command line with "entropy-lens" registered

lm-eval is an optional extra (`pip install 'entropy-lens[eval]'`): nothing here imports it at import;
harness/model.py and harness/evaluate.py do when they run.
"""

from pathlib import Path

__all__ = ["TASKS_DIR"]

TASKS_DIR = Path(__file__).parent / "tasks"  # lm-eval's --include_path for the passkey tasks
