"""`EntropyRecorder`: a context manager that turns entropy capture (and scales) on for a model.

    with EntropyRecorder(model, scales=1.2) as rec:
        model(input_ids)                 # any number of forwards
    rec.entropy   # (layers, heads, positions) float64 mean over the query rows seen, nats
    rec.count     # (positions,) how many rows were averaged at each position
    rec.session.paths  # {"separate"} or {"fused"}: sdpa + entropy pass, or the one fused Triton pass

On entry it registers the `entropy_lens` attention implementation, switches the model to it and
installs a forward pre-hook that reads the 2-D `attention_mask` (so padded query rows are left out
and left-padded rows are placed by their true position, cumsum(mask) − 1). On exit, exceptions
included, it restores the model's previous implementation and removes the hook.

The float64 sums live on the host: each layer's entropy leaves the GPU by an asynchronous copy and
is summed between forwards or at read-out; `rec.drain_into(total, sq, count)` moves everything into
the caller's own sums instead (what `scan` does with each batch).

`ScaleSession` is the same without recording: attention scales only (for loss-only passes and the
head-scale search, where the multipliers may be a trainable tensor).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from entropy_lens.capture.attention import _ACTIVE, ATTN_NAME, Session, register
from entropy_lens.capture.fused import FUSED_MODES
from entropy_lens.errors import EntropyLensError


class ScaleSession:
    """Apply attention-scale multipliers m_h (λ_h = m_h/√d) inside the model's attention.

    scales: None | float | array-like or tensor (layers, heads); a tensor keeps its autograd graph.
    impl:   the entropy backend (kernels.resolve_impl); fused: "auto" | "on" | "off" (capture/fused.py).
    `session.paths` tells afterwards which way the layers computed ("fused" / "separate").
    """

    def __init__(self, model, *, scales=None, impl: str = "auto", fused: str = "auto"):
        if fused not in FUSED_MODES:
            raise EntropyLensError(f"fused={fused!r} is not known; use one of {', '.join(FUSED_MODES)}")
        self.model = model
        self.session = Session(multipliers=_as_multipliers(model, scales), impl=impl, fused=fused)
        self._prev_impl = None
        self._token = None

    def __enter__(self):
        register()
        self._prev_impl = self.model.config._attn_implementation
        self.model.set_attn_implementation(ATTN_NAME)
        self._token = _ACTIVE.set(self.session)
        return self

    def __exit__(self, *exc):
        try:
            _ACTIVE.reset(self._token)
        finally:
            self.model.set_attn_implementation(self._prev_impl)
        return False


class EntropyRecorder(ScaleSession):
    """Accumulate per-layer, per-head, per-position attention entropy over forwards."""

    def __init__(self, model, *, scales=None, impl: str = "auto", fused: str = "auto"):
        super().__init__(model, scales=scales, impl=impl, fused=fused)
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.session.on_entropy = self._add
        self._acc = None  # (sum, sum of squares (layers, heads, n) float64, count (layers, n) int64), host
        self._pending = deque()  # (layer, entropy, key_offset, mask2d, CUDA events to wait for): not yet summed
        self._host = None  # numpy copies of _acc, made on first read after an _add
        self._mask2d = (None, None)  # the forward's 2-D attention mask on the host, the event of its copy
        self._hook = None

    # -- context --------------------------------------------------------------------------------
    def __enter__(self):
        self._hook = self.model.register_forward_pre_hook(self._read_mask, with_kwargs=True)
        try:
            return super().__enter__()
        except BaseException:
            self._hook.remove()
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._hook.remove()
            self._mask2d = (None, None)
            self.session.mask_memo.clear()

    def _read_mask(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        is_2d = isinstance(mask, torch.Tensor) and mask.ndim == 2
        self._mask2d = _to_host(mask.detach().bool()) if is_2d else (None, None)
        self.session.mask_memo.clear()  # the previous forward's masks are not kept alive
        self._fold(wait=False)  # earlier forwards' layers, as far as their copies have landed

    # -- accumulation ---------------------------------------------------------------------------
    def _add(self, layer: int, entropy: torch.Tensor, key_offset: int) -> None:
        """entropy (B, Hq, T) for queries at key positions key_offset .. key_offset + T − 1.

        The sums live on the host in float64, so the device holds nothing beyond the layer's own
        entropy (at 128K tokens a TinyLlama's float64 sums would take 1.5 GB of GPU memory). A CUDA
        entropy is copied into pinned memory without blocking the host. Layers are summed between
        forwards, never during one (the host keeps queueing the GPU's work): at the next forward's
        start as far as their copies have landed, at read-out, or by `drain_into`."""
        host, event = _to_host(entropy)
        mask, mask_event = self._mask2d
        self._pending.append((layer, host, key_offset, mask, [e for e in (event, mask_event) if e is not None]))
        self._host = None

    def drain_into(self, total: torch.Tensor, sq: torch.Tensor, count: torch.Tensor) -> None:
        """Add everything recorded into the caller's float64 sums (layers, heads, n) and row count (n,),
        waiting for copies in flight, and leave the recorder empty: a scan's batch goes straight into
        the scan's running sums, without the recorder's own arrays or a read-out copy."""
        if self._acc is not None:  # forwards summed before the last one began
            own_total, own_sq, own_count = self._acc
            seen = own_count.any(0).nonzero()  # as in _sums: the last position any row reached
            n = int(seen[-1]) + 1 if len(seen) else 0
            _check_room(n, total)
            total[..., :n] += own_total[..., :n]
            sq[..., :n] += own_sq[..., :n]
            count[:n] += own_count[0, :n]
        self._fold(wait=True, into=(total, sq, count))
        self._acc = self._host = None

    def _fold(self, wait: bool, into=None) -> None:
        """Sum the pending entropies whose copies have landed, oldest first (wait=True: all of them), into
        the recorder's sums or `into` = (total, sq, count (n,))."""
        while self._pending:
            layer, entropy, key_offset, mask, events = self._pending[0]
            if not all(e.query() for e in events):
                if not wait:
                    return
                for e in events:
                    e.synchronize()
            self._pending.popleft()
            n = key_offset + entropy.shape[-1]
            if into is None:
                self._grow(n)
                total, sq, count = self._acc
                count = count[layer]
            else:
                total, sq, count = into
                _check_room(n, total)
                count = count if layer == 0 else None  # rows per position: every layer sees the same
            _sum_rows(total[layer], sq[layer], count, entropy, key_offset, mask)

    def _grow(self, n: int) -> None:
        if self._acc is None:
            self._acc = (torch.zeros(self.n_layers, self.n_heads, 0, dtype=torch.float64),
                         torch.zeros(self.n_layers, self.n_heads, 0, dtype=torch.float64),
                         torch.zeros(self.n_layers, 0, dtype=torch.int64))  # fmt: skip
        have = self._acc[0].shape[-1]
        if n > have:  # doubling: decoding token by token copies O(n) in all; read-outs cut the unused tail
            self._acc = tuple(torch.nn.functional.pad(t, (0, max(n, 2 * have) - have)) for t in self._acc)

    def _sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Host copies, cut after the last position any row reached (left padding shifts rows down)."""
        self._fold(wait=True)
        if self._host is None:
            if self._acc is None:
                z = np.zeros((self.n_layers, self.n_heads, 0))
                self._host = (z, z.copy(), np.zeros((self.n_layers, 0), dtype=np.int64))
            else:
                total, sq, count = (t.numpy().copy() for t in self._acc)  # never views of _acc
                seen = np.flatnonzero(count.any(0))
                n = int(seen[-1]) + 1 if seen.size else 0
                self._host = (total[..., :n], sq[..., :n], count[:, :n])
        return self._host

    # -- results --------------------------------------------------------------------------------
    @property
    def count(self) -> np.ndarray:
        """(positions,) rows averaged per position (layer 0; all layers see the same rows)."""
        return self._sums()[2][0].copy()

    @property
    def sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Raw float64 accumulators (sum, sum of squares, count per layer): exact to merge."""
        return self._sums()

    @property
    def entropy(self) -> np.ndarray:
        """(layers, heads, positions) mean entropy in nats; NaN where nothing was seen."""
        total, _, count = self._sums()
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / count[:, None, :]

    @property
    def entropy_sq(self) -> np.ndarray:
        _, sq, count = self._sums()
        with np.errstate(invalid="ignore", divide="ignore"):
            return sq / count[:, None, :]


def _check_room(n: int, total) -> None:
    if n > total.shape[-1]:
        raise EntropyLensError(f"drain_into: the sums hold {total.shape[-1]} positions, the recorder saw {n}; "
                               "pass sums at least that long")  # fmt: skip


def _sum_rows(total, sq, count, entropy, key_offset: int, mask) -> None:
    """Add one layer's entropy (B, H, T) at key positions key_offset.. into total and sq (H, n) float64
    and, unless None, its rows into count (n,); with the forward's 2-D mask, padded rows add nothing
    and rows land at their true positions (cumsum(mask) − 1)."""
    B, _, T = entropy.shape
    n = key_offset + T
    e = entropy.to(torch.float64)
    if mask is not None and mask.shape[1] == n:
        keep = mask[:, -T:]
        pos = (mask.long().cumsum(1) - 1)[:, -T:].clamp_min(0)  # true positions; padded rows add 0
        e = e * keep[:, None, :]
        for b in range(B):  # positions within a row are distinct: deterministic index_add_
            total.index_add_(1, pos[b], e[b])
            sq.index_add_(1, pos[b], e[b] * e[b])
            if count is not None:
                count.index_add_(0, pos[b], keep[b].long())
    else:
        total[:, key_offset:n] += e.sum(0)
        sq[:, key_offset:n] += (e * e).sum(0)
        if count is not None:
            count[key_offset:n] += B


def _to_host(t: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """(t on the host, None), or for a CUDA tensor (a pinned copy being made, the event after it):
    the copy is queued on t's stream behind the kernels that produce t, and the host does not wait."""
    if not t.is_cuda:
        return t, None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(t.device))
    return host, event


def _as_multipliers(model, scales):
    """None | float | (layers, heads) -> what `Session.multipliers` holds."""
    if scales is None or isinstance(scales, (int, float)):
        return None if scales is None else float(scales)
    param = next(model.parameters())
    t = scales if isinstance(scales, torch.Tensor) else torch.as_tensor(np.asarray(scales, dtype=np.float32))
    return t.to(param.device)
