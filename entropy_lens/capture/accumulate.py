"""`HostSums`: per-layer row statistics summed on the host in float64, without stalling the GPU.

    sums = HostSums(n_layers, n_heads)
    sums.begin_forward(attention_mask)     # a forward starts: its 2-D mask (B, S), or None
    sums.add(layer, stats, key_offset)     # each layer: {statistic: (B, H, T)} of queries at offset..
    sums.read()                            # {"entropy", "entropy_sq", ...: (layers, heads, n) float64,
                                           #  "count": (n,) int64}

The sums are keyed by statistic (`kernels.stats.sum_names`: each statistic's sum and, for a `squared`
one, its square's, `<name>_sq`): whatever a layer reports is summed, so a model with attention sinks
(gpt-oss) adds `sink_mass` and one without has none. Each sum combines its rows by its statistic's
declared `Reduction` (statistics.reduction_of): a sum, or for a maximum (max_logit) the largest value
of any row at each position (−inf where no row reached it; padded rows left out).

The sums live on the host, so the device holds nothing beyond each layer's own statistics (at 128K
tokens a TinyLlama's float64 entropy sums would take 1.5 GB of GPU memory). A CUDA tensor (and the
forward's mask) is copied into pinned memory without blocking the host: the copy is queued on the
tensor's stream behind the kernels that produce it, and a CUDA event after it says when it has
landed. Layers are summed between forwards, never during one (the host keeps queueing the GPU's
work): at the next forward's start as far as their copies have landed (oldest first, never
waiting), and at `read` or `drain_into`, waiting for the rest.

Key statistics (attention received, `EntropyRecorder`'s second HostSums) are summed the same way: a
layer reports {statistic: (B, H, S)} for its S keys at offset 0, so a "row" is a batch row's key, placed
at its true position by the forward's mask (padded keys left out), and `count` says how many batch rows
had a key there.

Rows are counted once per forward, per position: with the reports of the first layer that reports
after `begin_forward` (every layer of a forward sees the same rows). With the forward's 2-D mask,
padded rows add nothing and rows land at their true positions, cumsum(mask) − 1, so left padding
shifts rows down; `read` and `drain_into` cut after the last position any row reached.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

import numpy as np
import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.contract import SAFE_SCORE
from entropy_lens.kernels.stats import sum_names
from entropy_lens.statistics import MEAN, reduction_of, statistic_of

FORWARD = object()  # HostSums.add's default mask: the forward's own (begin_forward's)


def copy_to_host(t: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """(t, None) for a host tensor; for a CUDA tensor (a pinned copy being made, the event after it):
    the copy is queued on t's stream behind the kernels that produce t, and the host does not wait."""
    if not t.is_cuda:
        return t, None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(t.device))
    return host, event


class HostSums:
    """Float64 sums per row statistic (layers, heads, n) (and of its square, where the statistic is
    `squared`: `<name>_sq`) and rows per position `count` (n,), keyed as `kernels.stats.sum_names` says.

    to_host: how a tensor reaches the host, `copy_to_host` by default; anything returning (host
    tensor, an object with query() -> bool and synchronize(), or None) will do (tests pass fakes).
    """

    def __init__(self, n_layers: int, n_heads: int, *, to_host: Callable = copy_to_host):
        self.n_layers, self.n_heads = n_layers, n_heads
        self._to_host = to_host
        # (layer, {stat: host tensor}, key_offset, mask, counts rows?, events, inputs_finite on the host or None)
        self._pending = deque()
        self._sums: dict[str, torch.Tensor] | None = None  # sum name -> float64; "count" int64; doubling
        self.stats: list[str] = []  # the statistics reported so far, in the order first seen
        self._read = None  # numpy copies of _sums, made on the first read after an add
        self._mask = (None, None)  # the forward's 2-D mask on the host, the event of its copy
        self._count_layer = None  # the layer whose reports count rows in this forward
        self._forward_layers: list[int] = []  # the layers that reported since begin_forward
        self._whole_sequence = False  # the forward's mask covers more than its rows' keys (a shard)
        self._wide = torch.empty(0, dtype=torch.float64)  # `_widened`'s buffer

    @property
    def pending(self) -> int:
        """Layer reports added but not yet summed (their copies in flight, or their forward running)."""
        return len(self._pending)

    @property
    def forward_layers(self) -> tuple[int, ...]:
        """The layers that reported since the last `begin_forward`, in order."""
        return tuple(self._forward_layers)

    def begin_forward(self, mask: torch.Tensor | None, *, whole_sequence: bool = False) -> None:
        """A forward starts. `mask`: its 2-D attention mask (B, S), True/1 = real token, or None. Sums
        the earlier forwards' layers as far as their copies have landed. `whole_sequence`: the mask
        covers the whole sequence while the forward sees a shard of it (--context-parallel), so a
        report of rows ending at n is placed by the mask's first n columns."""
        self._whole_sequence = whole_sequence
        self._mask = (None, None) if mask is None else self._to_host(mask.detach().bool())
        self._count_layer = None
        self._forward_layers = []
        self._fold(wait=False)

    def release_mask(self) -> None:
        """Forget the forward's mask (the recorder's exit): nothing of the model is kept alive."""
        self._mask = (None, None)

    def add(
        self,
        layer: int,
        stats: Mapping[str, torch.Tensor],
        key_offset: int,
        *,
        mask=FORWARD,
        counts=None,
        inputs_finite: torch.Tensor | None = None,
    ) -> None:
        """{statistic: (B, H, T)} for queries at key positions key_offset .. key_offset + T − 1: queued,
        the copies to the host started; summed later (see the module docstring). `mask`: the 2-D mask
        that places the rows (default: the forward's, from `begin_forward`; None: none); `counts`:
        whether this report counts its rows (default: the forward's first reporting layer does).
        `inputs_finite`: the layer's check of its inputs, (4,) bool on its device (query, key, value
        finite; the scores' bound within float32's range: capture/call.py's `check_finite_inputs` on a GPU),
        read with the statistics: a report whose inputs fail it is refused (EntropyLensError naming the
        layer) before anything of it, or of a report after it, is summed, whenever it is folded (the reports before it, which landed first, are
        summed as they land: a caller that gets the error drops the batch)."""
        heads = {t.shape[1] for t in stats.values()}
        if heads != {self.n_heads} or not 0 <= layer < self.n_layers:
            raise EntropyLensError(
                f"layer {layer} reported {', '.join(map(str, sorted(heads)))} heads, but the model's config "
                f"declares {self.n_layers} layers of {self.n_heads} heads: layer-dependent head counts or "
                "layer indices are not supported; please report the architecture"
            )
        if counts is None:
            if self._count_layer is None:
                self._count_layer = layer
            counts = layer == self._count_layer
        self._forward_layers.append(layer)
        copies = {name: self._to_host(t) for name, t in stats.items()}
        finite = (None, None) if inputs_finite is None else self._to_host(inputs_finite)
        self.stats += [name for name in stats if name not in self.stats]
        if mask is FORWARD:
            mask, mask_event = self._mask
        else:
            mask, mask_event = (None, None) if mask is None else self._to_host(mask.detach().bool())
        n = key_offset + next(iter(stats.values())).shape[-1]
        if mask is not None and self._whole_sequence:
            mask = mask[:, :n]  # the keys of these rows: their positions are cumsum(mask[:, :n]) − 1
        events = [e for _, e in (*copies.values(), finite) if e is not None] + (
            [mask_event] if mask_event else []
        )
        host = {name: t for name, (t, _) in copies.items()}
        self._pending.append((layer, host, key_offset, mask, counts, events, finite[0]))
        self._read = None

    def _fold(self, wait: bool, into: dict[str, torch.Tensor] | None = None) -> None:
        """Sum the pending reports whose copies have landed, oldest first (wait=True: all of them,
        waiting), into the own sums or the caller's `into` (keyed as the own)."""
        while self._pending:
            layer, stats, key_offset, mask, counts, events, finite = self._pending[0]
            if not all(e.query() for e in events):
                if not wait:
                    return
                for e in events:
                    e.synchronize()
            _check_inputs(layer, finite)
            self._pending.popleft()
            n = key_offset + next(iter(stats.values())).shape[-1]
            if into is None:
                self._grow(n)
                sums = self._sums
            else:
                sums = into
                _check_room(n, sums["count"])
            B, _, T = next(iter(stats.values())).shape
            rows = _placement(mask, B, T, key_offset)  # once per report: every sum places rows alike
            for name in stats:
                if name not in sums:
                    raise EntropyLensError(f"drain_into: this model reports {name}; pass a {name} sum")
            for name, values in stats.items():
                wide = self._widened(values)
                _rows_into(sums[name][layer], wide, reduction_of(name), key_offset, rows)
                if statistic_of(name).squared:
                    _rows_into(sums[name + "_sq"][layer], wide, MEAN, key_offset, rows, squared=True)
            if counts:
                _count_rows(sums["count"], B, T, key_offset, rows)

    def check_inputs(self) -> None:
        """EntropyLensError naming the layer where a report not yet summed held NaN or inf in its inputs
        (`add`'s inputs_finite), waiting for those checks' copies: what reads other statistics of the same
        forwards (the recorder's key statistics) asks this first."""
        for layer, _, _, _, _, events, finite in self._pending:
            if finite is not None:
                for e in events:
                    e.synchronize()
                _check_inputs(layer, finite)

    def _widened(self, values: torch.Tensor) -> torch.Tensor:
        """`values` in float64, in a buffer kept for the next report: a fresh multi-megabyte host tensor per
        report costs more (page faults) than the sums themselves."""
        if self._wide.numel() < values.numel():
            self._wide = torch.empty(values.numel(), dtype=torch.float64)
        return self._wide[: values.numel()].view(values.shape).copy_(values)

    def read(self) -> dict[str, np.ndarray]:
        """{sum name: (layers, heads, n) float64, "count": (n,) int64} on the host, waiting for copies in
        flight; n is 1 + the last position any row reached. Copies, never views of the live sums; the
        same dict until the next `add`."""
        self._fold(wait=True)
        if self._read is None:
            if self._sums is None:
                shape = (self.n_layers, self.n_heads, 0)
                self._read = {name: np.zeros(shape) for name in sum_names(self.stats)}
                self._read["count"] = np.zeros(0, dtype=np.int64)
            else:
                n = _reached(self._sums["count"])
                self._read = {k: t[..., :n].numpy().copy() for k, t in self._sums.items()}
        return self._read

    def drain_into(self, sums: dict[str, torch.Tensor]) -> None:
        """Add everything into the caller's float64 sums (layers, heads, n) and row count (n,) int64,
        keyed as `read`'s, waiting for copies in flight, and leave these sums empty: a scan's batch goes
        straight into its running sums, without a read-out copy. EntropyLensError when the caller's n is
        too short or a reported statistic has no sum there."""
        if self._sums is not None:  # forwards summed before the last one began
            n = _reached(self._sums["count"])
            _check_room(n, sums["count"])
            for name, own in self._sums.items():
                if name not in sums:
                    raise EntropyLensError(f"drain_into: this model reports {name}; pass a {name} sum")
                sums[name][..., :n] = reduction_of(name).combine(sums[name][..., :n], own[..., :n])
        self._fold(wait=True, into=sums)
        self._sums = self._read = None

    def _grow(self, n: int) -> None:
        shape = (self.n_layers, self.n_heads, 0)
        if self._sums is None:
            self._sums = {"count": torch.zeros(0, dtype=torch.int64)}
        for name in sum_names(self.stats):  # a statistic first reported now starts at zeros
            if name not in self._sums:
                have = self._sums["count"].shape[-1]
                self._sums[name] = torch.full(shape[:2] + (have,), _empty(name), dtype=torch.float64)
        have = self._sums["count"].shape[-1]
        if n > have:  # doubling: decoding token by token copies O(n) in all; read-outs cut the unused tail
            pad = max(n, 2 * have) - have
            self._sums = {
                k: torch.nn.functional.pad(t, (0, pad), value=_empty(k)) for k, t in self._sums.items()
            }


def _empty(name: str) -> float:
    """What a sum holds before any row: its reduction's identity (0, or −inf for a maximum)."""
    return reduction_of(name).identity


def _placement(mask, B: int, T: int, key_offset: int):
    """Where a report's T query rows at key positions key_offset.. land: None without the forward's 2-D
    mask over its keys (row t at position key_offset + t), else (keep (B, T) bool: real rows, pos (B, T):
    their true positions cumsum(mask) − 1, so left padding shifts rows down; padded rows at 0)."""
    if mask is None or mask.shape[1] != key_offset + T:
        return None
    return mask[:, -T:], (mask.long().cumsum(1) - 1)[:, -T:].clamp_min(0)


def _rows_into(total, values, reduction, key_offset: int, rows, *, squared: bool = False) -> None:
    """Combine float64 values (B, H, T) (their squares with `squared`) into total (H, n) float64 at key
    positions key_offset.. by `reduction` (summed, or the largest kept) over the batch; placed by `rows`
    (`_placement`), padded rows left out (as the identity). A sum without placement adds each batch row
    in place: no temporaries."""
    B, H, T = values.shape
    if rows is None and reduction is MEAN:
        window = total[:, key_offset : key_offset + T]
        for b in range(B):  # in batch order: deterministic
            if squared:
                window.addcmul_(values[b], values[b])
            else:
                window.add_(values[b])
        return
    if squared:
        values = values * values
    if rows is not None:
        keep, pos = rows
        kept = torch.where(keep.unsqueeze(1), values, reduction.identity)
        for b in range(B):  # positions within a row are distinct: deterministic
            total.scatter_reduce_(1, pos[b].expand(H, T), kept[b], reduction.over)
    else:
        window = total[:, key_offset : key_offset + T]
        window.copy_(reduction.combine(window, reduction.reduce(values, 0)))


def _check_inputs(layer: int, finite: torch.Tensor | None) -> None:
    """EntropyLensError naming the layer and its tensors that `add`'s inputs_finite (query, key, value
    finite; the scores' bound within float32's range) says held NaN or inf, or whose scores may leave
    float32's range; their statistics are undefined. The report stays pending: a recorder that refused a
    forward refuses every later read."""
    if finite is None or bool(finite.all()):
        return
    ok = finite.tolist()
    names = [name for name, fine in zip(("query", "key", "value"), ok, strict=False) if not fine]
    if names:
        raise EntropyLensError(
            f"layer {layer}'s {' and '.join(names)} held NaN or inf: the model produced NaN or inf before "
            "attention: check its weights, and run in float32 (--dtype float32) if bfloat16/float16 overflowed"
        )
    raise EntropyLensError(
        f"layer {layer}'s scores λ·q·k may leave float32's range (max|λ|·D·max|q|·max|k| above "
        f"{SAFE_SCORE:.3g}), in which the kernels compute them: scale q and k down, or capture with "
        "backend='reference' (float64)"
    )


def _count_rows(count, B: int, T: int, key_offset: int, rows) -> None:
    """Add a report's real rows into count (n,), placed by `rows` as `_rows_into` places them."""
    if rows is not None:
        keep, pos = rows
        for b in range(B):
            count.index_add_(0, pos[b], keep[b].long())
    else:
        count[key_offset : key_offset + T] += B


def _reached(count: torch.Tensor) -> int:
    """1 + the last position any row reached (count (n,) > 0), 0 when none did."""
    seen = count.nonzero()
    return int(seen[-1]) + 1 if len(seen) else 0


def _check_room(n: int, count) -> None:
    if n > count.shape[-1]:
        raise EntropyLensError(
            f"drain_into: the sums hold {count.shape[-1]} positions, the recorder saw {n}; "
            "pass sums at least that long"
        )
