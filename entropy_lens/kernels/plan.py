"""Which kernel runs, decided in one place: `plan` turns `--backend`, `--fused`, the device, the mask and
the score modifiers into the routes a layer can take, and `run` runs a route's kernel. ::

    BACKENDS  the kernels: "reference" (float64, materialises scores; tests), "torch_chunked" (exact
              streaming in torch, everywhere), "native" (the same loop in C++, CPU), "triton" (GPU)
    resolve_backend(backend, device, one_pass=False) -> a kernel name: "auto" is triton for CUDA tensors
              where triton is installed, else torch_chunked; for a one-pass route on CPU, native where
              it builds (ENTROPY_LENS_BACKEND overrides "auto")
    statistics_kernel(backend, q, k, mods) -> (kernel, mods in its form): what a statistics-only pass
              runs (`attention_entropy`); triton falls back to torch_chunked for a mask it cannot take
              (per query or per head; `masks.as_key_padding`) or a key bias, and takes the key-padding
              form and window otherwise
    plan(backend, fused, q, k, v, mods, fusable=True) -> Plan(separate, fused, mode): a layer's routes
    train_plan(backend, fused, q, k, v, mods, *, dropout, own_code) -> Route | None: the route of a
              layer that captures and wants gradients (a training step, a trainable scale)
    run(kernel, q, k, v, softmax_scale, mods, ...) -> RowStats
    decode_splits(q, k, mods) -> int (splits.py): for "triton", the key splits of a decode step's launch
              (few query rows on a long cache: triton_decode.py); 1, the row kernel. `run` asks it

A route names its path (what the results meta records as `attention_path`) and the kernel that computes
its statistics (`backend` in the meta), in one vocabulary::

    sdpa-then-entropy  torch sdpa's output (its flash kernels on GPU and CPU), then a statistics-only
                       pass of the kernel on the same q, k: two passes over K
    torch-streamed     torch_chunked's one pass: output and statistics from the same score tiles (the
                       separate route of a layer whose scores sdpa cannot compute: softcap, sinks, ALiBi)
    native             the native kernel's one pass (CPU)
    triton-fused       the Triton kernel's one pass (CUDA)

and for a layer that wants gradients (`train_plan`)::

    fused-train        kernels/train.py: the one pass's output and statistics, PyTorch's flash backward
                       from that output and the pass's log-sum-exp (native, torch_chunked; triton on CUDA)
    eager-then-entropy the model's own eager attention with autograd (softcap, sinks), a statistics pass
    sdpa-alibi-mask-then-entropy  sdpa with ALiBi (a key bias) as its float mask, a statistics pass
    own-then-entropy   the layer's own attention code (BLOOM at its own scale), a statistics pass

The separate route is sdpa-then-entropy where sdpa computes the scores and otherwise the one pass of
the statistics kernel's family (native for native, else torch-streamed); the fused route is the one
pass of the backend's kernel (for "auto" on CPU: native where it builds) where it applies: `fusable`
(no gradient wanted, no dropout), and for triton a mask it takes, no key bias and equal q/v head sizes.
`--fused off` keeps the separate route, `on` the fused one where there is one, and `auto` leaves both
for the capture to time (capture/fused.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entropy_lens.flags import (
    BACKENDS,
    DEFAULT_MEASURE,
    FUSED_MODES,
    Backend,
    Fused,
    Measure,
    parse_backend,
    require,
)
from entropy_lens.kernels.backends import (
    NATIVE,
    TABLE,
    TORCH_STREAMED,
    TRITON_FUSED,
    backend_of,
    resolve,
    train_kernel,
    trains_on,
)
from entropy_lens.kernels.contract import validate_block
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.splits import decode_splits
from entropy_lens.kernels.stats import RowStats
from entropy_lens.kernels.train import train_form

# What computed a layer's statistics, as `Session.paths` and the results meta (`attention_path`) name it
# (the one passes' names, TORCH_STREAMED, NATIVE, TRITON_FUSED, are each backend's `one_pass_path`: backends.py)
SDPA_THEN_ENTROPY = "sdpa-then-entropy"
FUSED_TRAIN = "fused-train"
EAGER_THEN_ENTROPY = "eager-then-entropy"
ALIBI_THEN_ENTROPY = "sdpa-alibi-mask-then-entropy"
OWN_THEN_ENTROPY = "own-then-entropy"


@dataclass(frozen=True)
class Route:
    """One way a layer's attention runs: the path the results meta records and the kernel that computes it.

    Args:
        path: the path's name, as the meta's `attention_path` records it (the module docstring's
            vocabulary: "sdpa-then-entropy", "torch-streamed", ...).
        kernel: the Backend that computes the statistics (and, one pass, the output); never AUTO.
        mods: the ScoreMods in that kernel's form (`statistics_kernel`).
    """

    path: str  # one of the paths above
    kernel: Backend  # the kernel that computes the statistics (and, one pass, the output): never AUTO
    mods: ScoreMods  # the score modifiers in that kernel's form


@dataclass(frozen=True)
class Plan:
    """A layer's routes, as `plan` builds them.

    Args:
        separate: sdpa's output and a statistics pass, or the streamed one pass where sdpa cannot.
        fused: the one pass where it applies and differs from `separate`; None otherwise.
        mode: the Fused flag: AUTO (the capture times both), ON, OFF.
    """

    separate: Route  # sdpa's output and a statistics pass, or the streamed one pass where sdpa cannot
    fused: Route | None  # the one pass where it applies and differs from `separate`
    mode: Fused  # --fused: AUTO (the capture times both), ON, OFF

    @property
    def fixed(self) -> Route | None:
        """The route that runs without timing anything, or None where "auto" must choose."""
        if self.fused is None or self.mode is Fused.OFF:
            return self.separate
        return self.fused if self.mode is Fused.ON else None


def resolve_backend(
    backend: Backend | str = Backend.AUTO, device: torch.device | str | None = None, *, one_pass: bool = False
) -> Backend:
    """The kernel `backend` names for tensors on `device` (None: only check the name); `one_pass`: for
    a route that computes the output too, where "auto" on CPU is the native kernel where it builds. A
    name is parsed here, at the public entrance (flags.parse_backend); a parsed Backend passes through.

    Args:
        backend: a Backend or its name ("auto" or one of `BACKENDS`).
        device: the tensors' device (a torch.device or its name); None only checks the name.
        one_pass: the route computes the output too ("auto" on CPU: native where it builds).

    Returns:
        Backend: the kernel that runs, never AUTO.

    Raises:
        EntropyLensError: an unknown name; triton without its package or off CUDA (outside
            TRITON_INTERPRET=1); native off CPU or where it does not build. Each message names the fix.
    """
    backend = parse_backend(backend)  # ENTROPY_LENS_BACKEND overrides a parsed "auto"
    return resolve(backend, None if device is None else torch.device(device).type, one_pass)


def statistics_kernel(
    backend: Backend | str, q, k, mods: ScoreMods, *, one_pass=False
) -> tuple[Backend, ScoreMods]:
    """(kernel, mods in its form) for validated inputs: for triton the mask is reduced to key padding
    (B|1, 1, 1, S) or None and the window merged with the mask's own, so the launcher does not check a
    (T, S) mask again; a mask the Triton kernel does not take, or a key bias, goes to torch_chunked.
    Every kernel computes every declared statistic (tests/kernels/test_stats.py), so the statistics asked for
    never change the kernel.

    Args:
        backend: a Backend or its name, as `resolve_backend` takes it.
        q: (B, Hq, T, D) validated queries; their device picks the kernel.
        k: (B, Hkv, S, D) validated keys.
        mods: the validated ScoreMods.
        one_pass: the pass computes the output too (as `resolve_backend`'s).

    Returns:
        tuple: (kernel, mods in its form), the kernel a Backend other than AUTO.

    Raises:
        EntropyLensError: as `resolve_backend`.
    """
    kernel = resolve_backend(backend, q.device, one_pass=one_pass)
    return backend_of(kernel).kernel_form(q, k, mods, one_pass)


def plan(backend: Backend, fused: Fused, q, k, v, mods: ScoreMods, *, fusable: bool = True) -> Plan:
    """The routes of a layer with queries q, keys k, values v and these modifiers (module docstring).

    Args:
        backend: the parsed Backend (flags.parse_backend); a raw string is refused.
        fused: the parsed Fused mode (flags.parse_fused).
        q: (B, Hq, T, D) queries.
        k: (B, Hkv, S, D) keys.
        v: (B, Hkv, S, Dv) values (the Triton one pass needs Dv == D).
        mods: the validated ScoreMods.
        fusable: whether a one pass may replace the separate route (False where a gradient or dropout
            is wanted).

    Returns:
        Plan: the separate route, the fused one (or None) and the mode.

    Raises:
        TypeError: backend or fused not parsed (flags.require).
        EntropyLensError: as `resolve_backend`.
    """
    require(backend=backend, fused=fused)  # parsed where the run started (entropy_lens/flags.py)
    kernel, kernel_mods = statistics_kernel(backend, q, k, mods)
    if mods.sdpa_computes:
        separate = Route(SDPA_THEN_ENTROPY, kernel, kernel_mods)
    else:  # the streamed one pass of the kernel's family (native for native, else torch_chunked)
        streamed = backend_of(kernel).streamed
        separate = Route(backend_of(streamed).one_pass_path, streamed, mods)
    one_pass = None
    if fusable and fused is not Fused.OFF:
        kernel, kernel_mods = statistics_kernel(backend, q, k, mods, one_pass=True)
        if backend_of(kernel).takes_one_pass(q, v):
            one_pass = Route(backend_of(kernel).one_pass_path, kernel, kernel_mods)
    if one_pass is not None and one_pass.path == separate.path:
        one_pass = None
    return Plan(separate, one_pass, fused)


def run(
    kernel: str,
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    measure: Measure = DEFAULT_MEASURE,
    block_q=None,
    block_k=None,
    with_lse: bool = False,
    key_state: bool = False,
    counted=None,
    spans=None,
) -> RowStats:
    """RowStats of `measure.stats` (and the output, for values v) from `kernel` on validated inputs, at
    the statistics' parameters in `measure` (flags.Measure, passed whole to the kernel). The tile
    `block_q` × `block_k` (None: the kernel's default) is torch_chunked's and native's; the reference
    has none and the Triton kernel autotunes its own.

    Args:
        kernel: the Backend to run (not AUTO: `resolve_backend` or a Route's kernel).
        q: (B, Hq, T, D) validated queries, any float dtype.
        k: (B, Hkv, S, D) validated keys.
        v: (B, Hkv, S, Dv) values for the output too, or None for the statistics alone.
        softmax_scale: (Hq,) float32, the validated scale (`contract.validate_scale`).
        mods: the ScoreMods in the kernel's form.
        measure: the parsed record of what to measure (its `stats`, the row statistics; its parameters).
        block_q: the tile's query rows (torch_chunked, native); None: the kernel's default.
        block_k: the tile's keys; None: the kernel's default.
        with_lse: the rows' log-sum-exp too (`RowStats.lse`, for the column pass of attention received);
            the reference gives none (its column pass materialises the probabilities).
        key_state: the column state of attention received from the same pass too (`RowStats.key_state`):
            the native kernel alone keeps it (`ONE_PASS_KEYS`); the others' is a pass of its own
            (kernels/received.py).
        counted: with key_state, None (every row) or (B|1, T) bool: the query rows that count.
        spans: None, or (B|1, n, 2) int64 key ranges [lo, hi) per batch row (kernels/slices.py's
            `span_ranges`): each row's mass on them too (`RowStats.spans`), where the backend's row pass
            sums them (`spans_in_rows`: torch_chunked, native); a session's span masses then need no
            slice pass.

    Returns:
        RowStats: each of `measure.stats` (B, Hq, T) float32, the output (B, T, Hq, Dv) for values v,
        `lse`, `key_state` and `spans`.

    Raises:
        ValueError: values v with the reference kernel, which computes no output; key_state on a kernel
            outside ONE_PASS_KEYS; spans on a kernel whose row pass does not sum them.
        TypeError: `measure` not a parsed flags.Measure.
    """
    require(measure=measure)
    block_q, block_k = validate_block(block_q, "block_q"), validate_block(block_k, "block_k")
    blocks = {"block_q": block_q} | ({} if block_k is None else {"block_k": block_k})
    backend = backend_of(kernel)
    if key_state and not backend.keeps_key_state:
        raise ValueError(
            f"the {kernel} kernel keeps no column state in its row pass; run received_state on its lse"
        )
    if spans is not None and not backend.spans_in_rows:
        raise ValueError(
            f"the {kernel} kernel's row pass sums no key spans; take span masses from the slice pass "
            "(kernels/slices.py's slice_values) on its lse"
        )
    return backend.rows(
        q,
        k,
        v,
        softmax_scale,
        mods,
        measure=measure,
        blocks=blocks,
        with_lse=with_lse,
        key_state=key_state,
        counted=counted,
        spans=spans,
    )


# the kernels whose row pass also keeps the column state of attention received (`run`'s key_state): one
# pass over the keys instead of a row pass and a column pass (each backend's `keeps_key_state`)
ONE_PASS_KEYS = tuple(name for name, backend in TABLE.items() if backend.keeps_key_state)

__all__ = [
    "BACKENDS",
    "FUSED_MODES",
    "NATIVE",
    "ONE_PASS_KEYS",
    "TORCH_STREAMED",
    "TRITON_FUSED",
    "Backend",
    "Fused",
    "Plan",
    "Route",
    "RowStats",
    "decode_splits",
    "plan",
    "resolve_backend",
    "run",
    "statistics_kernel",
]


def train_plan(
    backend: Backend, fused: Fused, q, k, v, mods: ScoreMods, *, dropout: bool, own_code: bool
) -> Route | None:
    """The route of a layer that captures and wants gradients (module docstring): "fused-train" where
    kernels/train.py takes the inputs (`train_form`) under --fused auto/on, no dropout and a --backend of
    its kernels (auto, native, torch_chunked; on CUDA auto, triton); else None where sdpa computes the
    scores (the plan's separate route: sdpa's output with autograd, then the statistics), or the model's
    own output with autograd beside a statistics pass: its layer's own code where `own_code` (BLOOM at
    its own scale), sdpa's ALiBi mask for a position bias, the model's eager attention otherwise.

    Args:
        backend: the parsed Backend.
        fused: the parsed Fused mode.
        q: (B, Hq, T, D) queries.
        k: (B, Hkv, S, D) keys.
        v: (B, Hkv, S, Dv) values.
        mods: the validated ScoreMods.
        dropout: the layer trains with attention dropout (no fused-train route then).
        own_code: the layer's own attention code computes its output (BLOOM at its own scale).

    Returns:
        Route | None: the route, or None where sdpa computes the scores (the plan's separate route).

    Raises:
        TypeError: backend or fused not parsed (flags.require).
    """
    require(backend=backend, fused=fused)
    kind = q.device.type
    fusable = not dropout and fused is not Fused.OFF and trains_on(backend, kind)
    form, why = train_form(q, k, v, mods) if fusable else (None, "")
    if why is None:  # on CUDA the Triton kernel's pass and flash's CUDA backward: no mask left in its form
        return Route(FUSED_TRAIN, train_kernel(backend, kind), form if kind == "cuda" else mods)
    if mods.sdpa_computes:
        return None
    kernel, kernel_mods = statistics_kernel(backend, q, k, mods)
    path = OWN_THEN_ENTROPY if own_code else ALIBI_THEN_ENTROPY if mods.biased else EAGER_THEN_ENTROPY
    return Route(path, kernel, kernel_mods)
