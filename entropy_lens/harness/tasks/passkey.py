"""The hooks the passkey task YAMLs beside this file name (lm-eval imports this file by its path)."""

from entropy_lens.harness.passkey import PasskeyTask, passkey_dataset, passkey_result

__all__ = ["PasskeyTask", "passkey_dataset", "passkey_result"]
