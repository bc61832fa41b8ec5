"""What the capture tests share (test_capture.py, test_schedule.py, and the Triton interpreter's cases in
triton_interp_cases.py; pytest puts tests/ on sys.path, so they import it as `capture_cases`):

    CPU_FUSED, CPU_FUSED_BACKEND   the path and the kernel of the CPU's fused pass here
    MASK_KINDS                     the kinds of attention mask `recorded_backends` runs
    square_sdpa_mask(B, T, **kw)   transformers' sdpa_mask for T × T, in its 5.0-5.2 and newer signatures
    recorded_backends(backend, fused, device)   {mask kind: the backends a session recorded}, each call's
                                   entropy held to the float64 reference
    StatsTo(fn), RowsTo(fn, probe_rows)   a session's consumer (capture/reports.py) handing the row
                                   statistics, or the last rows' probabilities, to `fn`
"""

import torch
from tiny import make_tiny_model
from transformers.masking_utils import sdpa_mask, sliding_window_causal_mask_function

from entropy_lens.capture.attention import entropy_lens_attention
from entropy_lens.capture.call import Session, activate
from entropy_lens.capture.reports import Reports
from entropy_lens.flags import Measure
from entropy_lens.kernels import attention_entropy, native_available

# The CPU fused pass: the native kernel where it builds, else the streamed torch path (capture/paths.py)
CPU_FUSED = "native" if native_available() else "torch-streamed"
CPU_FUSED_BACKEND = "native" if native_available() else "torch_chunked"

MASK_KINDS = ("none", "key_padding", "causal_padding", "sliding_window", "per_query", "per_head")


def square_sdpa_mask(B: int, T: int, **kw):
    """transformers' `sdpa_mask` for T queries over T keys, in either of its signatures: (batch_size,
    q_length, kv_length) since 5.3, (batch_size, cache_position, kv_length) in 5.0-5.2 (the kvpress
    environment's, tests/kvpress)."""
    import inspect

    second = list(inspect.signature(sdpa_mask).parameters)[1]
    return sdpa_mask(B, torch.arange(T) if second == "cache_position" else T, T, **kw)


def recorded_backends(backend: str, fused: str = "off", device: str = "cpu") -> dict[str, set[str]]:
    """{mask kind: the session's `backends`} after one capturing attention call per kind of mask,
    each call's entropy checked against the float64 reference of the attention sdpa applies."""
    attn = make_tiny_model(n_heads=4, n_kv_heads=2).model.layers[0].self_attn.to(device)
    g = torch.Generator().manual_seed(2)
    B, T = 2, 12
    q, k, v = (torch.randn(B, h, T, 16, generator=g) for h in (4, 2, 2))
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[1, :4] = False
    window = sliding_window_causal_mask_function(5)
    masks = {
        "none": None,
        "key_padding": keep[:, None, None, :],
        "causal_padding": square_sdpa_mask(B, T, attention_mask=keep, allow_is_causal_skip=False),
        "sliding_window": square_sdpa_mask(
            B, T, mask_function=window, attention_mask=keep, allow_is_causal_skip=False
        ),
        "per_query": torch.rand(1, 1, T, T, generator=g) > 0.3,
        "per_head": torch.rand(1, 4, T, T, generator=g) > 0.3,
    }
    masks["per_query"][..., 0] = masks["per_head"][..., 0] = True  # every row sees a key
    backends, got = {}, []
    for kind in MASK_KINDS:
        mask = masks[kind]
        session = Session(
            reports=StatsTo(lambda layer, stats, offset: got.append(stats["entropy"])),
            measure=Measure.parse(backend=backend, fused=fused),
        )
        on_device = [None if x is None else x.to(device) for x in (q, k, v, mask)]
        with torch.no_grad(), activate(session):
            entropy_lens_attention(attn, *on_device)
        causal = mask is None or mask.shape[2] == 1  # as sdpa: a full mask decides alone
        want = attention_entropy(
            q, k, softmax_scale=attn.scaling, causal=causal, mask=mask, backend="reference"
        )
        assert (got[-1].cpu() - want).abs().max().item() <= 1e-5, kind
        backends[kind] = session.backends
    return backends


class StatsTo(Reports):
    """A session's consumer (capture/reports.py) for the tests: each layer's row statistics handed to
    `fn(layer, stats, key_offset)`."""

    def __init__(self, fn):
        self.fn = fn

    def report_stats(self, layer, stats, key_offset, *, inputs_finite=None):
        self.fn(layer, stats, key_offset)


class RowsTo(Reports):
    """A session's consumer for the tests: each call's last `probe_rows` rows' probabilities handed to
    `fn(layer, p)`."""

    def __init__(self, fn, probe_rows: int):
        self.fn, self.probe_rows = fn, probe_rows

    def report_rows(self, layer, p):
        self.fn(layer, p)
