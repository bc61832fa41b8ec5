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

`ScaleSession` is the same without recording: attention scales only (for loss-only passes and the
head-scale search, where the multipliers may be a trainable tensor).
"""

from __future__ import annotations

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
        self._sum = np.zeros((self.n_layers, self.n_heads, 0))
        self._sq = np.zeros_like(self._sum)
        self._count = np.zeros((self.n_layers, 0), dtype=np.int64)
        self._mask2d = None
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
            self._mask2d = None

    def _read_mask(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        self._mask2d = mask.detach().bool() if isinstance(mask, torch.Tensor) and mask.ndim == 2 else None

    # -- accumulation ---------------------------------------------------------------------------
    def _add(self, layer: int, entropy: torch.Tensor, key_offset: int) -> None:
        """entropy (B, Hq, T) for queries at key positions key_offset .. key_offset + T − 1."""
        B, _, T = entropy.shape
        e = entropy.double().cpu().numpy()
        if self._mask2d is not None and self._mask2d.shape[1] == key_offset + T:
            m = self._mask2d.cpu().numpy()
            valid = m[:, -T:]
            pos = (np.cumsum(m, axis=1) - 1)[:, -T:]
        else:
            valid = np.ones((B, T), dtype=bool)
            pos = np.broadcast_to(np.arange(key_offset, key_offset + T), (B, T))
        self._grow(int(pos[valid].max()) + 1 if valid.any() else 0)
        for b in range(B):
            p = pos[b][valid[b]]
            eb = e[b][:, valid[b]]  # (H, n_valid); positions within a row are distinct
            self._sum[layer][:, p] += eb
            self._sq[layer][:, p] += eb * eb
            self._count[layer, p] += 1

    def _grow(self, n: int) -> None:
        cur = self._sum.shape[-1]
        if n > cur:
            pad = ((0, 0), (0, 0), (0, n - cur))
            self._sum = np.pad(self._sum, pad)
            self._sq = np.pad(self._sq, pad)
            self._count = np.pad(self._count, ((0, 0), (0, n - cur)))

    # -- results --------------------------------------------------------------------------------
    @property
    def count(self) -> np.ndarray:
        """(positions,) rows averaged per position (layer 0; all layers see the same rows)."""
        return self._count[0].copy()

    @property
    def sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Raw float64 accumulators (sum, sum of squares, count per layer): exact to merge."""
        return self._sum, self._sq, self._count

    @property
    def entropy(self) -> np.ndarray:
        """(layers, heads, positions) mean entropy in nats; NaN where nothing was seen."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._sum / self._count[:, None, :]

    @property
    def entropy_sq(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._sq / self._count[:, None, :]


def _as_multipliers(model, scales):
    """None | float | (layers, heads) -> what `Session.multipliers` holds."""
    if scales is None or isinstance(scales, (int, float)):
        return None if scales is None else float(scales)
    param = next(model.parameters())
    t = scales if isinstance(scales, torch.Tensor) else torch.as_tensor(np.asarray(scales, dtype=np.float32))
    return t.to(param.device)
