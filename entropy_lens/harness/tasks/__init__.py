"""The lm-eval task YAMLs shipped with the package (lm-eval's --include_path: entropy_lens.harness.TASKS_DIR)
and the hooks they name (passkey.py, which lm-eval imports by its path)."""
