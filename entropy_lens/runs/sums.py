"""ScanSums: a scan's float64 running sums over samples, and everything that updates them.

    sums = ScanSums(layers, heads, length, stats=s, key_stats=k)  # entropy=False: a loss-only scan;
                                                   # s, k: the row and key statistics of --stats
    sums.add(capture, nll)                         # one batch: the capture's entropies and the (B, T) loss
                                                   # (and sink mass, for a model with attention sinks)
    sums.add(capture, nll, positions=p, samples=r0)  # a context-parallel shard: its positions p, the
                                                   # samples counted where r0 (rank 0)
    sums.save(path, identity, wall_s, decided) / sums.restore(path, identity) -> decided   # the checkpoint
    sums.all_reduce(world)                         # under torchrun: the sums of all ranks
    sums.paths, sums.backends                      # what computed the layers: recorded in the meta
    sums.result(meta, reduction) -> ScanResult     # means over samples

Sums are updated in place: fresh arrays per batch can cost the host more than the forward that filled
them (docs/internals/layout.md). `add` defers Ctrl-C and SIGTERM until it is done, so a checkpoint never
sees sums and counts out of step; because the sums are stored exactly and added in the same order, a
resumed scan ends with the same arrays as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from pathlib import Path

import numpy as np
import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.stats import ROW_STATS, sum_names
from entropy_lens.results import ScanResult, atomic_savez
from entropy_lens.runs.distributed import World, all_reduce_sum, gathered
from entropy_lens.runs.output import CHECKPOINT, scan_difference
from entropy_lens.statistics import ENTROPY, KEY_STATISTICS, KEYS, STATISTICS, reduction_of, statistic_of

__all__ = ["INTERRUPTS", "KEY_COUNT", "ScanSums", "interrupts_deferred"]

KEY_COUNT = "key_count"  # the sum of the batch rows with a real key at each key position


class ScanSums:
    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        length: int,
        *,
        entropy: bool = True,
        stats: tuple[str, ...] = (),
        key_stats: tuple[str, ...] = (),
    ):
        self.entropy = entropy  # whether batches carry entropies (a recorder) or only the loss
        # the float64 sums of each row statistic (kernels.stats.sum_names: entropy and `stats` from the
        # start, so that a rank without samples holds them too; sink_mass added when a model reports it),
        # of the loss and its square, rows per position and samples
        # (each combines by its statistic's reduction: a maximum holds the largest row at each position,
        # −inf before any)
        statistics = sum_names(dict.fromkeys((ENTROPY.name, *stats)))  # each once, entropy first
        self.sliced = tuple(
            name for name in stats if name not in ROW_STATS
        )  # row-slice arrays (Slices.arrays)
        self.arrays = {
            **{name: np.full((n_layers, n_heads, length), _empty(name)) for name in statistics},
            "loss": np.zeros(length),
            "loss_sq": np.zeros(length),
            "count": np.zeros(length, dtype=np.int64),
            "samples": np.array(0),
        }
        # attention received, by key position (keys 0 .. length − 1), and the batch rows with a key there
        self.key_sums = sum_names(key_stats)
        if key_stats:
            self.arrays |= {
                name: np.full((n_layers, n_heads, length), _empty(name)) for name in self.key_sums
            }
            self.arrays[KEY_COUNT] = np.zeros(length, dtype=np.int64)
        self.prior_wall_s = 0.0
        self.paths: set[str] = set()  # what computed the layers: capture/paths.py's names
        self.backends: set[str] = set()  # the entropy kernels that ran (none for a loss-only scan)

    @property
    def samples(self) -> int:
        return int(self.arrays["samples"])

    def add(
        self, capture, nll: torch.Tensor, *, positions: np.ndarray | None = None, samples: bool = True
    ) -> None:
        """One batch: `capture` the batch's ScaleSession (an EntropyRecorder when `entropy`), drained
        into the sums, and the (B, T) next-token loss. A context-parallel shard (runs/context_parallel.py)
        passes the `positions` of the loss's columns (None: 0 .. T − 1) and counts the batch's `samples`
        on one rank only."""
        columns = slice(None) if positions is None else positions  # distinct positions: += is exact
        arrays = self.arrays
        with interrupts_deferred():
            # the layers first (each folded as soon as its copy has landed), then the loss, whose read
            # waits for the whole forward
            if self.entropy:
                names = sum_names(capture.stats)
                for name in names:  # a statistic the model reports beyond entropy (sink mass): one more sum
                    arrays.setdefault(name, np.full_like(arrays[ENTROPY.name], _empty(name)))
                capture.drain_into({k: torch.from_numpy(arrays[k]) for k in (*names, "count")})
                if self.key_sums:
                    keys = {k: torch.from_numpy(arrays[k]) for k in self.key_sums}
                    capture.drain_into(keys | {"count": torch.from_numpy(arrays[KEY_COUNT])}, KEYS)
            loss = nll.double().cpu().numpy()  # (B, T): every position of a packed chunk is a real token
            if not self.entropy:
                arrays["count"][columns] += loss.shape[0]
            arrays["loss"][columns] += loss.sum(0)
            arrays["loss_sq"][columns] += (loss**2).sum(0)
            if samples:
                arrays["samples"] = np.array(int(arrays["samples"]) + loss.shape[0])
            self.paths |= capture.session.paths
            self.backends |= capture.session.backends

    def units(self) -> dict[str, str]:
        """{statistic: its unit} of the row and key statistics summed (statistics.STATISTICS, KEY_STATISTICS)."""
        units = {
            name: stat.unit for name, stat in (STATISTICS | KEY_STATISTICS).items() if name in self.arrays
        }
        return units | {name: statistic_of(name).unit for name in self.sliced}

    def all_reduce(self, world: World) -> None:
        """Every rank ends with the sums of all ranks (a no-op in one process). A sum that only some ranks
        made (sink_mass appears with the first batch; a rank may have none) is zeros on the others."""
        if world.size > 1:
            for names in gathered(sorted(self.arrays), world, what="the names of the sums"):
                for name in names:
                    self.arrays.setdefault(name, np.full_like(self.arrays[ENTROPY.name], _empty(name)))
        by_op = {}  # each sum by its reduction's all-reduce op (SUM, MAX)
        for k, v in self.arrays.items():
            by_op.setdefault(reduction_of(k).all_reduce, {})[k] = v
        self.arrays = {}
        for op, arrays in sorted(by_op.items()):  # every rank in the same order
            self.arrays |= all_reduce_sum(arrays, world, op=op)

    def save(self, path: Path, identity: dict, wall_s: float, decided: dict | None = None) -> None:
        """The checkpoint: the sums, the scan's `identity` and what it `decided` at run time (JSON: the
        fused paths it chose, its thread count, ...), which a resumed scan must reuse."""
        atomic_savez(
            path,
            identity=np.array(json.dumps(identity, sort_keys=True)),
            wall_s=np.array(self.prior_wall_s + wall_s),
            ran=np.array(json.dumps({"paths": sorted(self.paths), "backends": sorted(self.backends)})),
            decided=np.array(json.dumps(decided or {}, sort_keys=True)),
            **self.arrays,
        )

    def restore(self, path: Path, identity: dict) -> dict | None:
        """Continue from the checkpoint at `path`: its `decided` record, or None when the file is
        unreadable (a damaged checkpoint cannot be resumed: the caller starts over and says so)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
            theirs = json.loads(str(data["identity"]))
            ran = json.loads(str(data["ran"])) if "ran" in data else {}
            decided = json.loads(str(data["decided"])) if "decided" in data else {}
            state = {k: data[k] for k in (*self.arrays, *sum_names(ROW_STATS)) if k in data}  # sink_mass too
            wall_s = float(data["wall_s"])
        except Exception:  # noqa: BLE001 - truncated, not a zip, a missing key, not JSON: unreadable
            return None
        differs = scan_difference(json.loads(json.dumps(identity)), theirs, names=CHECKPOINT)
        if differs is not None:
            raise EntropyLensError(
                f"{path} is the checkpoint of a different scan ({differs}); rerun with that scan's flags "
                "to finish it, or pass --force to discard it"
            )
        if any(k not in state or state[k].shape != v.shape for k, v in self.arrays.items()):
            return None
        self.arrays, self.prior_wall_s = state, wall_s
        self.paths |= set(ran.get("paths", ()))
        self.backends |= set(ran.get("backends", ()))
        return decided

    def result(self, meta: dict, reduction: str) -> ScanResult:
        """Means over samples (a maximum, max_logit: the largest row at each position); `mean` then
        averages entropy (and its mean square) over each layer's heads (a maximum: its largest head),
        `none` stores them with zero heads. A position no sample reached, or a
        NaN/inf mean, is an error: a results file never holds them where a number is expected."""
        arrays, n = self.arrays, self.arrays["count"]
        if not n.all():
            raise EntropyLensError(
                f"no sample reached {int((n == 0).sum())} of {n.size} positions (the first: "
                f"{int(np.argmin(n > 0))}): the capture saw no rows there; nothing was written"
            )
        stat_sums = [k for k in sum_names((*ROW_STATS, *self.sliced)) if k in arrays]
        mean = {
            k: reduction_of(k).finish(arrays[k], n).astype(np.float32)
            for k in (*stat_sums, "loss", "loss_sq")
        }
        if self.key_sums:  # by key position, over the batch rows that had the key
            mean |= {
                k: reduction_of(k).finish(arrays[k], arrays[KEY_COUNT]).astype(np.float32)
                for k in self.key_sums
            }
            stat_sums += self.key_sums
        broken = [k for k, v in mean.items() if not np.isfinite(v).all()]
        if broken:
            raise EntropyLensError(
                f"the scan's {' and '.join(broken)} hold NaN or inf (the model overflowed, e.g. in "
                "float16/bfloat16); nothing was written: rerun with --dtype float32"
            )
        for k in stat_sums:
            if reduction == "mean":
                mean[k] = reduction_of(k).summarize(mean[k], 1)[:, None]
            elif reduction == "none":
                mean[k] = mean[k][:, :0]
        columns = {k: mean.pop(k) for k in (*ENTROPY.sums, "loss", "loss_sq")}
        return ScanResult(**columns, count=n.copy(), meta=meta, stats=mean)


def _empty(name: str) -> float:
    """A sum before any sample: its reduction's identity (0, or −inf for a maximum)."""
    return reduction_of(name).identity


INTERRUPTS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C, and a batch scheduler's stop (cli.main: the same)


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C (SIGINT) or SIGTERM inside the block is handled when the block ends, as it would have been
    (main thread only: elsewhere signals cannot be handled, and none arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: caught.append((signum, frame))) for sig in INTERRUPTS
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not caught:
        return
    signum, frame = caught[0]
    handler = previous[signum]
    if callable(handler):
        handler(signum, frame)  # Python's own SIGINT handler raises KeyboardInterrupt here
    elif handler == signal.SIG_DFL and signum == signal.SIGINT:
        raise KeyboardInterrupt
    elif handler == signal.SIG_DFL:
        signal.raise_signal(
            signum
        )  # the default action, now that the sums are whole: SIGTERM ends the process
