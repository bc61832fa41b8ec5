"""Builders shared by the tests of the project's training runs (test_training.py, test_monitor_runs.py):
a run interrupted at a chosen step, the weights a run saved."""

from __future__ import annotations

import numpy as np
from safetensors.numpy import load_file

import entropy_lens.data as data_module


def weights(folder) -> dict[str, np.ndarray]:
    return load_file(folder / "model.safetensors")


def crash_at(step: int):
    """data.random_windows, interrupted (as by Ctrl-C) when training asks for the batch of `step`."""
    real = data_module.random_windows

    def windows(stream, length, n, seed, at):
        if at == step:
            raise KeyboardInterrupt
        return real(stream, length, n, seed, at)

    return windows
