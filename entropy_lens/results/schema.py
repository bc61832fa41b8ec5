"""The results file's schema: its versions, arrays and meta keys, the names of older files mapped to
today's (`upgrade_meta`), and the types of the meta fields the readers compute with (`check_meta`).
The module docstring of `entropy_lens.results` documents every key."""

from __future__ import annotations

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.files import is_integer, kind_of, shown
from entropy_lens.statistics import ENTROPY, KEY_STATISTICS, PARAMETERS, ROW_PARAMETERS, SINK_MASS

__all__ = [
    "ARRAYS",
    "ENTROPY_REDUCTIONS",
    "READABLE_VERSIONS",
    "REQUIRED_META",
    "SCHEMA_VERSION",
    "check_meta",
    "schema_version_of",
    "upgrade_meta",
]

SCHEMA_VERSION = 3  # 2: row statistics beyond entropy (scan --stats), meta stats and first_keys; 3: key
# statistics (attention received by key position: received, received_max, received_mean), meta query_window
READABLE_VERSIONS = (1, 2, 3)  # version 1 files (entropy and sink mass only) load unchanged
VERSION_1_STATS = (SINK_MASS.name, SINK_MASS.name + "_sq")  # the arrays beyond ARRAYS that version 1 knew
ARRAYS = (*ENTROPY.sums, "loss", "loss_sq", "count")
REQUIRED_META = (
    "schema_version",
    "entropy_lens_version",
    "git_hash",
    "model",
    "config_hash",
    "nope",
    "head_dim",
    "scales",
    "data",
    "seed",
    "samples",
    "length",
    "dtype",
    "device",
    "backend",
    "wall_time_s",
)


ENTROPY_REDUCTIONS = ("heads", "mean", "none")  # the --record values, also meta `entropy_reduction`
# What files written before the glossary's names (docs/reference/glossary.md) say, and today's name for it.
LEGACY_META_KEYS = {"len": "length"}
LEGACY_REDUCTIONS = {"per_head": "heads", "mean_heads": "mean", "not_captured": "none"}


def upgrade_meta(meta: dict) -> dict:
    """`meta` with the keys and values of files written before the glossary's names replaced by today's
    (a copy; `meta` itself is not changed)."""
    meta = dict(meta)
    for old, new in LEGACY_META_KEYS.items():
        if old in meta and new not in meta:
            meta[new] = meta.pop(old)
    reduction = meta.get("entropy_reduction")
    if reduction in LEGACY_REDUCTIONS:
        meta["entropy_reduction"] = LEGACY_REDUCTIONS[reduction]
    return meta


def schema_version_of(meta: dict, stats: dict) -> int:
    """The lowest schema version that describes a file of `meta` and `stats`: 3 for key statistics
    (attention received, with the key statistics' parameters in meta), 2 for row statistics beyond sink
    mass (scan --stats, with meta `stats` and the row statistics' parameters), else 1, which every reader opens. A version this code
    does not know (a
    newer writer's) is kept: what it adds cannot be judged here."""
    claimed = meta.get("schema_version")
    if claimed is not None and claimed not in READABLE_VERSIONS:
        return claimed
    key_parameters = set(PARAMETERS) - set(ROW_PARAMETERS)  # version 3's meta: the query window
    if any(name.removesuffix("_sq") in KEY_STATISTICS for name in stats) or key_parameters & set(meta):
        return 3
    new_stats = set(stats) - set(VERSION_1_STATS)
    return 2 if new_stats or "stats" in meta or set(ROW_PARAMETERS) & set(meta) else 1


# meta fields the readers compute with, and the type each must have (None allowed where optional)
META_INTEGERS = ("length", "head_dim", "samples")
OPTIONAL_INTEGERS = ("seed", "n_layers", "n_heads", "n_kv_heads", "batch_size", *PARAMETERS)
META_STRINGS = ("model", "data")


def check_meta(meta: dict, source: str) -> None:
    """Refuse meta fields of the wrong type in one line: a string `length` "256" is not 256."""
    wrong = lambda key, want: EntropyLensError(
        f"{source}: meta {key} must be {want}, got {kind_of(meta[key])} {shown(meta[key])}; the "
        "file is corrupt, rerun the scan"
    )
    for key in (*META_INTEGERS, *OPTIONAL_INTEGERS):
        if key in meta and not is_integer(meta[key]) and not (key in OPTIONAL_INTEGERS and meta[key] is None):
            raise wrong(key, "an integer")
    for key in META_STRINGS:
        if not isinstance(meta.get(key, ""), str):
            raise wrong(key, "a string")
    if "stats" in meta and not (
        isinstance(meta["stats"], dict) and all(isinstance(v, str) for v in meta["stats"].values())
    ):
        raise wrong("stats", "an object of {statistic: unit}")
    scales = meta["scales"]
    try:
        table = np.asarray(scales, dtype=np.float64)
    except (ValueError, TypeError):
        table = None
    if table is None or isinstance(scales, (str, bytes)) or not np.all(np.isfinite(table)):
        raise EntropyLensError(
            f"{source}: meta scales {shown(scales)} is not a table of numbers ([layers][heads] "
            "multipliers of 1/√d); the file is corrupt, rerun the scan"
        )
