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

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult
from entropy_lens.results.pattern import write_pattern
from entropy_lens.settings import check_argument
from entropy_lens.statistics import FIRST_KEYS, FIRST_MASS, RECENT_KEYS, RECENT_MASS, SINK_MASS

__all__ = ["HeadProfile", "head_profile"]


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
        """Write DuoAttention's attention-pattern folder (module docstring) for kvpress's DuoAttentionPress:
        each KV head's distant mass (clipped to [0, 1]) as its score, K and W as the sink and the window,
        through `results.pattern.write_pattern`, which checks everything before any write and never
        writes through a link or over another program's file.

        Args:
            folder: the folder to write (made where missing); its two pattern files are replaced.

        Returns:
            Path: the folder.

        Raises:
            EntropyLensError: an empty name, a target that is no folder (a file, a device, a FIFO), a folder
                that cannot be made, or a file there that is not a pattern file, in one line.
        """
        scores = np.clip(self.distant, 0.0, 1.0)
        return write_pattern(folder, scores, sink_size=self.sink_size, recent_size=self.recent_size)


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
