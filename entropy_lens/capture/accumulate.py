"""`HostSums`: per-layer entropies summed on the host in float64, without stalling the GPU.

    sums = HostSums(n_layers, n_heads)
    sums.begin_forward(attention_mask)     # a forward starts: its 2-D mask (B, S), or None
    sums.add(layer, entropy, key_offset)   # each layer: entropy (B, H, T) of queries at offset..
    total, sq, count = sums.read()         # (layers, heads, n), (layers, heads, n) float64; (n,) int64
    sums.read_sink_mass()                  # (layers, heads, n) float64 sum of sink mass, or None

Models with attention sinks (gpt-oss) also report each row's sink mass (`add(..., sink_mass=)`),
summed beside the entropy; models without report none, and `read_sink_mass()` is None.

The sums live on the host, so the device holds nothing beyond each layer's own entropy (at 128K
tokens a TinyLlama's float64 sums would take 1.5 GB of GPU memory). A CUDA entropy (and the
forward's mask) is copied into pinned memory without blocking the host: the copy is queued on the
tensor's stream behind the kernels that produce it, and a CUDA event after it says when it has
landed. Layers are summed between forwards, never during one (the host keeps queueing the GPU's
work): at the next forward's start as far as their copies have landed (oldest first, never
waiting), and at `read` or `drain_into`, waiting for the rest.

Rows are counted once per forward, per position: with the reports of the first layer that reports
after `begin_forward` (every layer of a forward sees the same rows). With the forward's 2-D mask,
padded rows add nothing and rows land at their true positions, cumsum(mask) − 1, so left padding
shifts rows down; `read` and `drain_into` cut after the last position any row reached.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import torch

from entropy_lens.errors import EntropyLensError


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
    """Float64 sums of entropy and its square (layers, heads, n) and rows per position (n,).

    to_host: how a tensor reaches the host, `copy_to_host` by default; anything returning (host
    tensor, an object with query() -> bool and synchronize(), or None) will do (tests pass fakes).
    """

    def __init__(self, n_layers: int, n_heads: int, *, to_host: Callable = copy_to_host):
        self.n_layers, self.n_heads = n_layers, n_heads
        self._to_host = to_host
        self._pending = deque()  # (layer, entropy, sink mass | None, key_offset, mask, counts rows?, events)
        # (total, sq, sink (layers, heads, n) float64, count (n,) int64), grown by doubling
        self._sums = None
        self.has_sinks = False  # whether any layer reported a sink mass
        self._read = None  # numpy copies of _sums, made on the first read after an add
        self._mask = (None, None)  # the forward's 2-D mask on the host, the event of its copy
        self._count_layer = None  # the layer whose reports count rows in this forward
        self._forward_layers: list[int] = []  # the layers that reported since begin_forward

    @property
    def pending(self) -> int:
        """Layer entropies added but not yet summed (their copies in flight, or their forward running)."""
        return len(self._pending)

    @property
    def forward_layers(self) -> tuple[int, ...]:
        """The layers that reported since the last `begin_forward`, in order."""
        return tuple(self._forward_layers)

    def begin_forward(self, mask: torch.Tensor | None) -> None:
        """A forward starts. `mask`: its 2-D attention mask (B, S), True/1 = real token, or None. Sums
        the earlier forwards' layers as far as their copies have landed."""
        self._mask = (None, None) if mask is None else self._to_host(mask.detach().bool())
        self._count_layer = None
        self._forward_layers = []
        self._fold(wait=False)

    def release_mask(self) -> None:
        """Forget the forward's mask (the recorder's exit): nothing of the model is kept alive."""
        self._mask = (None, None)

    def add(self, layer: int, entropy: torch.Tensor, key_offset: int, sink_mass: torch.Tensor | None = None):
        """entropy (B, H, T) for queries at key positions key_offset .. key_offset + T − 1 (and, for a
        model with sinks, the rows' sink mass, same shape): queued, its copy to the host started; summed
        later (see the module docstring)."""
        if entropy.shape[1] != self.n_heads or not 0 <= layer < self.n_layers:
            raise EntropyLensError(
                f"layer {layer} reported {entropy.shape[1]} heads, but the model's config declares "
                f"{self.n_layers} layers of {self.n_heads} heads: layer-dependent head counts or layer "
                "indices are not supported; please report the architecture"
            )
        if self._count_layer is None:
            self._count_layer = layer
        self._forward_layers.append(layer)
        host, event = self._to_host(entropy)
        sink, sink_event = (None, None) if sink_mass is None else self._to_host(sink_mass)
        self.has_sinks |= sink_mass is not None
        mask, mask_event = self._mask
        events = [e for e in (event, sink_event, mask_event) if e is not None]
        self._pending.append((layer, host, sink, key_offset, mask, layer == self._count_layer, events))
        self._read = None

    def _fold(self, wait: bool, into=None) -> None:
        """Sum the pending entropies whose copies have landed, oldest first (wait=True: all of them,
        waiting), into the own sums or `into` = (total, sq (layers, heads, n), count (n,))."""
        while self._pending:
            layer, entropy, sink, key_offset, mask, counts, events = self._pending[0]
            if not all(e.query() for e in events):
                if not wait:
                    return
                for e in events:
                    e.synchronize()
            self._pending.popleft()
            n = key_offset + entropy.shape[-1]
            if into is None:
                self._grow(n)
                total, sq, sink_sum, count = self._sums
            else:
                total, sq, sink_sum, count = into
                _check_room(n, total)
            e = entropy.to(torch.float64)
            parts = [(total[layer], e), (sq[layer], e * e)]
            if sink is not None:
                if sink_sum is None:
                    raise EntropyLensError("drain_into: this model reports sink mass; pass a sink_mass sum")
                parts.append((sink_sum[layer], sink.to(torch.float64)))
            _sum_rows(parts, count if counts else None, key_offset, mask)

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(total, sq (layers, heads, n) float64, count (n,) int64) on the host, waiting for copies in
        flight; n is 1 + the last position any row reached. Copies, never views of the live sums; the
        same tuple until the next `add`."""
        self._fold(wait=True)
        if self._read is None:
            if self._sums is None:
                z = np.zeros((self.n_layers, self.n_heads, 0))
                self._read = (z, z.copy(), z.copy(), np.zeros(0, dtype=np.int64))
            else:
                n = _reached(self._sums[3])
                self._read = tuple(t[..., :n].numpy().copy() for t in self._sums)
        total, sq, _, count = self._read
        return total, sq, count

    def read_sink_mass(self) -> np.ndarray | None:
        """(layers, heads, n) float64 sum of the rows' sink mass (divide by the count for the mean), or
        None for a model without sinks."""
        self.read()
        return self._read[2] if self.has_sinks else None

    def drain_into(
        self,
        total: torch.Tensor,
        sq: torch.Tensor,
        count: torch.Tensor,
        sink_mass: torch.Tensor | None = None,
    ) -> None:
        """Add everything into the caller's float64 sums (layers, heads, n) and row count (n,) int64,
        waiting for copies in flight, and leave these sums empty: a scan's batch goes straight into
        its running sums, without a read-out copy. EntropyLensError when the caller's n is too short."""
        if self._sums is not None:  # forwards summed before the last one began
            own_total, own_sq, own_sink, own_count = self._sums
            n = _reached(own_count)
            _check_room(n, total)
            total[..., :n] += own_total[..., :n]
            sq[..., :n] += own_sq[..., :n]
            if self.has_sinks:
                if sink_mass is None:
                    raise EntropyLensError("drain_into: this model reports sink mass; pass a sink_mass sum")
                sink_mass[..., :n] += own_sink[..., :n]
            count[:n] += own_count[:n]
        self._fold(wait=True, into=(total, sq, sink_mass, count))
        self._sums = self._read = None

    def _grow(self, n: int) -> None:
        if self._sums is None:
            shape = (self.n_layers, self.n_heads, 0)
            self._sums = (
                torch.zeros(shape, dtype=torch.float64),
                torch.zeros(shape, dtype=torch.float64),
                torch.zeros(shape, dtype=torch.float64),
                torch.zeros(0, dtype=torch.int64),
            )
        have = self._sums[0].shape[-1]
        if n > have:  # doubling: decoding token by token copies O(n) in all; read-outs cut the unused tail
            pad = max(n, 2 * have) - have
            self._sums = tuple(torch.nn.functional.pad(t, (0, pad)) for t in self._sums)


def _reached(count: torch.Tensor) -> int:
    """1 + the last position any row reached (count (n,) > 0), 0 when none did."""
    seen = count.nonzero()
    return int(seen[-1]) + 1 if len(seen) else 0


def _check_room(n: int, total) -> None:
    if n > total.shape[-1]:
        raise EntropyLensError(
            f"drain_into: the sums hold {total.shape[-1]} positions, the recorder saw {n}; "
            "pass sums at least that long"
        )


def _sum_rows(parts, count, key_offset: int, mask) -> None:
    """Add each (sum (H, n) float64, values (B, H, T) float64) of `parts` at key positions key_offset..
    and, unless None, the rows into count (n,); with the forward's 2-D mask, padded rows add nothing
    and rows land at their true positions (cumsum(mask) − 1)."""
    B, _, T = parts[0][1].shape
    n = key_offset + T
    if mask is not None and mask.shape[1] == n:
        keep = mask[:, -T:]
        pos = (mask.long().cumsum(1) - 1)[:, -T:].clamp_min(0)  # true positions; padded rows add 0
        for b in range(B):  # positions within a row are distinct: deterministic index_add_
            for total, values in parts:
                total.index_add_(1, pos[b], values[b] * keep[b])
            if count is not None:
                count.index_add_(0, pos[b], keep[b].long())
    else:
        for total, values in parts:
            total[:, key_offset:n] += values.sum(0)
        if count is not None:
            count[key_offset:n] += B
