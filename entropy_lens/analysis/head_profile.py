"""Streaming and retrieval heads: how each head's attention splits into the sink (the first K real keys),
the local window (its last W keys) and the distant keys between them, from a long-context scan that
recorded `first_mass` (--first-keys K) and `recent_mass` (--recent-keys W): the quantity DuoAttention
uses to tell streaming heads (sink and local window suffice) from retrieval heads::

    profile = head_profile(ScanResult.load("long.npz"))   # K, W: the scan's --first-keys, --recent-keys
    profile.distant                  # (layers, KV heads) mean distant mass, 1 − sink − local − sink_mass
    print(profile.table())           # one row per layer, the KV heads' distant mass
    profile.export("patterns/mine")  # DuoAttention's files: config.json, full_attention_heads.tsv

Per (layer, KV head): the mean over the positions where distant keys exist and the two windows do not
overlap (i >= K + W − 1 .. the scan's length) of each query head's distant mass 1 − first_mass −
recent_mass (− sink_mass where the model has attention sinks: a sink is no key), then the mean over the
KV head's group of query heads (the KV cache is kept or dropped per KV head). The export writes
DuoAttention's attention-pattern folder, the files kvpress's DuoAttentionPress reads: config.json
({"sink_size": K, "recent_size": W}) and full_attention_heads.tsv (layers rows × KV heads columns,
tab-separated, values in [0, 1]: high = a retrieval head, which needs its whole cache).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, atomic_write_text, check_regular_target, printable
from entropy_lens.settings import check_argument
from entropy_lens.statistics import FIRST_KEYS, FIRST_MASS, RECENT_KEYS, RECENT_MASS, SINK_MASS

__all__ = ["HeadProfile", "head_profile"]

PATTERN_CONFIG = "config.json"  # DuoAttention's attention-pattern folder: its two files
PATTERN_HEADS = "full_attention_heads.tsv"


@dataclass
class HeadProfile:
    """Each KV head's attention split into sink, local window and distant keys (`head_profile`).

    Args:
        sink: (layers, KV heads) mean mass on the first `sink_size` real keys.
        local: (layers, KV heads) mean mass on the last `recent_size` keys of each row.
        distant: (layers, KV heads) mean mass on the keys between them (a sink's share excluded).
        sink_size: K, the scan's --first-keys.
        recent_size: W, the scan's --recent-keys.
        positions: (a, b) the positions averaged over.
        model: the scan's model.
    """

    sink: np.ndarray
    local: np.ndarray
    distant: np.ndarray
    sink_size: int
    recent_size: int
    positions: tuple[int, int]
    model: str = ""

    def table(self) -> str:
        """One row per layer: each KV head's distant mass (high: a retrieval head), then the layer's mean.

        Returns:
            str: the table, as the scan summary prints it.
        """
        layers, heads = self.distant.shape
        a, b = self.positions
        title = (
            f"distant mass by KV head (1 − sink − local; sink: first {self.sink_size} keys, local: last "
            f"{self.recent_size}; positions [{a}, {b}); high: a retrieval head, low: a streaming head)"
        )
        lines = [
            title,
            f"{'layer':<8}" + "".join(f"{f'kv {h}':>8}" for h in range(heads)) + f"{'mean':>8}",
        ]
        for layer in range(layers):
            cells = "".join(f"{v:>8.3f}" for v in self.distant[layer])
            lines.append(f"{layer:<8}{cells}{self.distant[layer].mean():>8.3f}")
        return "\n".join(lines)

    def export(self, folder: str | Path) -> Path:
        """Write DuoAttention's attention-pattern folder (module docstring) for kvpress's DuoAttentionPress,
        each file atomically. Every check runs before any write: the folder must be a folder (made
        where missing), and a file already at either name is replaced only where it is one this export
        wrote (a pattern file: `_is_pattern_file`), never through a link or over another program's file.

        Args:
            folder: the folder to write (made where missing); its two pattern files are replaced.

        Returns:
            Path: the folder.

        Raises:
            EntropyLensError: an empty name, a target that is no folder (a file, a device, a FIFO), a folder
                that cannot be made, or a file there that is not a pattern file, in one line.
        """
        folder = check_regular_target(folder, flag="export's folder", folder=True, example="patterns/mine")
        for name in (PATTERN_CONFIG, PATTERN_HEADS):
            _check_replaceable(folder / name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise EntropyLensError(
                f"cannot make the folder {printable(folder)} ({err.strerror or err}); pass a writable folder"
            ) from None
        config = {"sink_size": self.sink_size, "recent_size": self.recent_size}
        atomic_write_text(folder / PATTERN_CONFIG, json.dumps(config, indent=2) + "\n")
        rows = ["\t".join(f"{v:.6f}" for v in layer) for layer in np.clip(self.distant, 0.0, 1.0)]
        atomic_write_text(folder / PATTERN_HEADS, "\n".join(rows) + "\n")
        return folder


def _check_replaceable(path: Path) -> None:
    """EntropyLensError in one line unless nothing stands at `path` or a pattern file does (a regular file,
    not a link, that `_is_pattern_file` reads as this export's): another program's file is kept."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file() or not _is_pattern_file(path):
        what = f"a link to {printable(os.path.realpath(path))}" if path.is_symlink() else "not a pattern file"
        raise EntropyLensError(
            f"{printable(path)} is {what} this export wrote, and is kept; move it away or pass another folder"
        )


def _is_pattern_file(path: Path) -> bool:
    """Whether `path` reads as a file `HeadProfile.export` writes: config.json holding exactly sink_size and
    recent_size as whole numbers, or a tab-separated table of numbers in [0, 1]."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.name == PATTERN_CONFIG:
            config = json.loads(text)
            return (
                isinstance(config, dict)
                and set(config) == {"sink_size", "recent_size"}
                and all(type(v) is int for v in config.values())
            )
        values = [float(cell) for line in text.splitlines() if line for cell in line.split("\t")]
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return bool(values) and all(0.0 <= v <= 1.0 for v in values)


def head_profile(result: ScanResult, *, sink: int | None = None, recent: int | None = None) -> HeadProfile:
    """Each KV head's sink, local and distant attention from a scan with `--stats first_mass,recent_mass`
    (module docstring); K and W are the scan's --first-keys and --recent-keys.

    Args:
        result: a scan's result with first_mass and recent_mass recorded per head (--record heads).
        sink: K, the sink's keys, to check against the scan's --first-keys (None: the scan's).
        recent: W, the local window, to check against the scan's --recent-keys (None: the scan's).

    Returns:
        HeadProfile: the split per (layer, KV head).

    Raises:
        EntropyLensError: sink or recent not a whole number in --first-keys's or --recent-keys's range, a
            statistic missing, heads averaged (--record mean), or a scan too short to have distant keys,
            each naming the scan that gives them.
    """
    # the flags' own ranges (--first-keys, --recent-keys): a suggestion below names a value the CLI takes
    check_argument("sink", sink, int | None, FIRST_KEYS.spec, example=None)
    check_argument("recent", recent, int | None, RECENT_KEYS.spec, example=None)
    names = set(result.stat_names)
    needed = (FIRST_MASS.name, RECENT_MASS.name)
    if not set(needed) <= names or result.entropy_reduction != "heads":
        raise EntropyLensError(
            "a head profile needs first_mass and recent_mass per head: scan with --stats "
            f"{','.join(needed)} --record heads (and {FIRST_KEYS.flag} K {RECENT_KEYS.flag} W, the sink and the "
            "window)"
        )
    K, W = FIRST_KEYS.read(result.meta), RECENT_KEYS.read(result.meta)
    if (sink is not None and sink != K) or (recent is not None and recent != W):
        again = f"{FIRST_KEYS.flag} {sink if sink is not None else K} {RECENT_KEYS.flag} {recent if recent is not None else W}"
        raise EntropyLensError(
            f"the scan measured the first {K} and the last {W} keys; for sink={sink}, recent={recent} scan "
            f"again with {again}"
        )
    a, b = K + W - 1, result.length
    if b - a < 1:
        raise EntropyLensError(
            f"positions up to {b} have no distant keys beyond the first {K} and the last {W}; scan with --len "
            f"{K + W + 64} or more (DuoAttention profiles heads on long contexts), or a smaller --recent-keys"
        )
    sink = result.stat(FIRST_MASS.name)[:, :, a:b].astype(np.float64)
    local = result.stat(RECENT_MASS.name)[:, :, a:b].astype(np.float64)
    beyond = 1.0 - sink - local
    if SINK_MASS.name in names:
        beyond -= result.stat(SINK_MASS.name)[:, :, a:b]
    per_kv = lambda x: _by_kv_head(x.mean(-1), int(result.meta.get("n_kv_heads") or result.n_heads))
    return HeadProfile(
        sink=per_kv(sink),
        local=per_kv(local),
        distant=per_kv(beyond.clip(min=0.0)),
        sink_size=K,
        recent_size=W,
        positions=(a, b),
        model=str(result.meta.get("model", "")),
    )


def _by_kv_head(values: np.ndarray, kv_heads: int) -> np.ndarray:
    """(layers, query heads) -> (layers, KV heads): the mean over each KV head's group of query heads."""
    layers, heads = values.shape
    if kv_heads < 1 or heads % kv_heads:
        raise EntropyLensError(
            f"{heads} query heads do not split into {kv_heads} KV heads; the meta is corrupt"
        )
    return values.reshape(layers, kv_heads, heads // kv_heads).mean(-1)
