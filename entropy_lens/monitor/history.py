"""The monitor's history and its versioned file: `results/history.py` reads and writes them, torch-free
beside the results file, so that `entropy-lens view` opens a history (the view sits on the results
side, below the monitor). Here under the name the monitor's code and docs use."""

from entropy_lens.results.history import SCHEMA, SCHEMA_VERSION, History, Record, load_history

__all__ = ["SCHEMA", "SCHEMA_VERSION", "History", "Record", "load_history"]
