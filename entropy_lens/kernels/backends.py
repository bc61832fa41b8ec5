"""The kernels' backends as a table: one object per backend, implementing what a kernel offers, looked up
once by name (`backend_of`). Outside this module and flags.py no code compares a backend by its name: a
caller asks the object what it can do, and calls it. ::

    backend_of(kernel) -> KernelBackend        the entry of a resolved Backend (never AUTO)
    resolve(backend, kind, one_pass) -> Backend  "auto" resolved for a device kind ("cpu", "cuda"), and
                                               the named backend checked for it
    built_first(backend, one_pass) -> bool    whether the run may build a kernel on first use (native)
    trains_on(backend, kind) -> bool           whether it has a training step's one pass on `kind`
    train_kernel(backend, kind) -> Backend     the kernel of that pass (auto resolved)

What each entry offers (`KernelBackend`; a capability a backend lacks raises, naming the one to use)::

    rows(q, k, v, scale, mods, *, measure, blocks, with_lse, key_state, counted, spans) -> RowStats
                    the row pass: the statistics, the output with values v, the log-sum-exp, (where
                    `keeps_key_state`) the column state of attention received from the same pass, and
                    (where `spans_in_rows`) each row's mass on the key ranges `spans`
    stream(q, k, v, scale, mods, *, extra, measure, blocks) -> (state, out)
                    the final streaming state {"m", "l", "u", *extra} and the output: the rows'
                    log-sum-exp (probabilities, slices, received) and a training step's forward
    key_state(q, k, lse, scale, mods, blocks) -> {"sum", "max", "count"}: the column pass of received
    kernel_form(q, k, mods, one_pass) -> (Backend, mods): the kernel that takes these inputs, and the
                    modifiers in its form (Triton: the mask as key padding; another mask: the fallback)
    takes_one_pass(q, v) -> bool: whether its one pass (output and statistics) serves a layer's route
    takes_values(q, v) -> bool: whether its output takes values v beside q (Triton: q's head size only)
    materialises   it reads from the materialised probabilities (the float64 reference): no lse, no
                   streaming state
    keeps_key_state  its row pass keeps the column state of attention received too (one pass over keys)
    spans_in_rows  its row pass sums each row's mass on given key ranges (`spans`), as first_mass's keys:
                   a session's span masses come from the row pass, not from a slice pass after it
    one_pass_path  the route name of its one pass (kernels/plan.py's vocabulary), None where it has none
    streamed       the backend whose one pass is the separate route where sdpa cannot compute the scores
    train_device   the device kind ("cpu", "cuda") where its one pass is a training step's forward (a
                   flash backward of that kind follows), None where it trains nowhere
    built_on_first_use, folds  a compiled extension built on first use (native); a per-tile step compiled
                   on request (torch_chunked, kernels/fold.py)

A new backend is one subclass here and its entry in TABLE (tests/kernels run every kernel of the table).
"""

from __future__ import annotations

import os

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import DEFAULT_MEASURE, Backend, Measure, triton_available
from entropy_lens.kernels.contract import check_score_range
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.native import (
    native_available,
    native_status,
    received_native,
    row_stats_native,
    stream_native,
)
from entropy_lens.kernels.received_torch import received_torch
from entropy_lens.kernels.reference import row_stats_reference
from entropy_lens.kernels.splits import decode_splits
from entropy_lens.kernels.stats import RowStats
from entropy_lens.kernels.torch_chunked import OUTPUT_BLOCKS, row_stats_torch, stream_torch

# The route names of the one passes (kernels/plan.py's vocabulary, recorded as `attention_path`)
TORCH_STREAMED = "torch-streamed"
NATIVE = "native"
TRITON_FUSED = "triton-fused"


class KernelBackend:
    """What a kernel offers (module docstring); the base refuses every pass, naming the fix."""

    name: Backend
    materialises = False
    keeps_key_state = False
    spans_in_rows = False
    one_pass_path: str | None = None
    streamed = Backend.TORCH_CHUNKED
    train_device: str | None = None
    built_on_first_use = False  # a compiled extension built on first use (minutes, once per machine)
    folds = False  # its per-tile step may be compiled on request (kernels/fold.py)

    def check(self, kind: str | None) -> None:
        """EntropyLensError where this backend cannot run on tensors of device `kind` (None: any)."""

    def kernel_form(self, q, k, mods: ScoreMods, one_pass: bool = False) -> tuple[Backend, ScoreMods]:
        """(the kernel that takes these inputs, mods in its form): this backend and the mods as they are."""
        return self.name, mods

    def takes_one_pass(self, q, v) -> bool:
        """Whether this backend's one pass (output and statistics) serves q and values v (a layer's route)."""
        return False

    def takes_values(self, q, v) -> bool:
        """Whether its output takes values v beside q (any head size but Triton's)."""
        return True

    def rows(
        self,
        q,
        k,
        v,
        softmax_scale,
        mods: ScoreMods,
        *,
        measure: Measure,
        blocks: dict,
        with_lse: bool,
        key_state: bool,
        counted,
        spans=None,
    ) -> RowStats:
        raise NotImplementedError(f"the {self.name} kernel has no row pass")

    def stream(
        self,
        q,
        k,
        v,
        softmax_scale,
        mods: ScoreMods,
        *,
        extra=(),
        measure: Measure = DEFAULT_MEASURE,
        blocks=None,
    ):
        raise ValueError(
            f"the {self.name} kernel keeps no streaming state (it materialises the probabilities); "
            "use backend='torch_chunked'"
        )

    def key_state(self, q, k, lse, softmax_scale, mods: ScoreMods, blocks: dict) -> dict[str, torch.Tensor]:
        raise ValueError(f"the {self.name} kernel has no column pass on an lse; use backend='torch_chunked'")


class Reference(KernelBackend):
    """float64, materialises the scores (tests; small T)."""

    name = Backend.REFERENCE
    materialises = True

    def rows(
        self, q, k, v, softmax_scale, mods, *, measure, blocks, with_lse, key_state, counted, spans=None
    ):
        if v is not None:
            raise ValueError("the reference computes statistics, not the output; use another backend")
        return row_stats_reference(q, k, softmax_scale, mods, measure=measure)


class TorchChunked(KernelBackend):
    """Exact streaming in torch, everywhere (its one pass serves the CPU; on CUDA sdpa's output is faster)."""

    name = Backend.TORCH_CHUNKED
    one_pass_path = TORCH_STREAMED
    train_device = "cpu"
    folds = True
    spans_in_rows = True

    def takes_one_pass(self, q, v) -> bool:
        return q.device.type == "cpu"

    def rows(
        self, q, k, v, softmax_scale, mods, *, measure, blocks, with_lse, key_state, counted, spans=None
    ):
        return row_stats_torch(
            q, k, v, softmax_scale, mods, measure=measure, with_lse=with_lse, spans=spans, **blocks
        )

    def stream(self, q, k, v, softmax_scale, mods, *, extra=(), measure=DEFAULT_MEASURE, blocks=None):
        if blocks is None and v is not None:  # the tile of a pass that computes the output too
            blocks = dict(zip(("block_q", "block_k"), OUTPUT_BLOCKS, strict=True))
        return stream_torch(q, k, v, softmax_scale, mods, extra=extra, measure=measure, **(blocks or {}))

    def key_state(self, q, k, lse, softmax_scale, mods, blocks):
        return received_torch(q, k, lse, softmax_scale, mods, **blocks)


class Native(KernelBackend):
    """The same loop in C++ on CPU (kernels/native), built on first use; its row pass keeps the column state
    of attention received too."""

    name = Backend.NATIVE
    keeps_key_state = True
    spans_in_rows = True
    one_pass_path = NATIVE
    streamed = Backend.NATIVE
    train_device = "cpu"
    built_on_first_use = True

    def check(self, kind):
        if kind is None:
            return
        if kind != "cpu":
            raise EntropyLensError(f"the native backend runs on CPU tensors, not {kind}; use --backend auto")
        if not native_available():
            raise EntropyLensError(
                f"the native CPU kernel is {native_status()}; use --backend torch_chunked (or auto)"
            )

    def takes_one_pass(self, q, v) -> bool:
        return True

    def rows(
        self, q, k, v, softmax_scale, mods, *, measure, blocks, with_lse, key_state, counted, spans=None
    ):
        return row_stats_native(
            q,
            k,
            v,
            softmax_scale,
            mods,
            measure=measure,
            with_lse=with_lse,
            key_state=key_state,
            counted=counted,
            spans=spans,
            **blocks,
        )

    def stream(self, q, k, v, softmax_scale, mods, *, extra=(), measure=DEFAULT_MEASURE, blocks=None):
        return stream_native(q, k, v, softmax_scale, mods, extra=extra, measure=measure, **(blocks or {}))

    def key_state(self, q, k, lse, softmax_scale, mods, blocks):
        return received_native(q, k, lse, softmax_scale, mods, **blocks)


class Triton(KernelBackend):
    """The Triton kernels on CUDA (TRITON_INTERPRET=1: on CPU, tests): key padding and a sliding window as
    masks, no key bias, the output at q's head size; autotuned tiles (`blocks` unused)."""

    name = Backend.TRITON
    one_pass_path = TRITON_FUSED
    train_device = "cuda"

    def check(self, kind):
        if not triton_available():
            raise EntropyLensError(
                "the triton backend needs the triton package: pip install triton (or use --backend torch_chunked)"
            )
        if kind not in (None, "cuda") and os.environ.get("TRITON_INTERPRET") != "1":
            raise EntropyLensError(
                f"the triton backend runs on CUDA tensors, not {kind}; use --device "
                "cuda, --backend torch_chunked, or set TRITON_INTERPRET=1 (tests only) before importing "
                "entropy_lens"
            )

    def kernel_form(self, q, k, mods, one_pass=False):
        """A key bias, or a mask per query or per head, goes to the exact streaming path (on CPU, under the
        interpreter, a one pass runs the native kernel where it builds, as "auto" would); key padding and a
        window are reduced to the kernel's form ((B|1, 1, 1, S) or None, the window merged)."""
        if mods.mask is None and mods.key_bias is None:
            return self.name, mods
        native = one_pass and q.device.type == "cpu" and native_available()
        fallback = Backend.NATIVE if native else Backend.TORCH_CHUNKED
        if mods.key_bias is not None:
            return fallback, mods
        form = as_key_padding(mods.mask, q.shape[0], q.shape[2], k.shape[2], mods.causal, mods.window)
        if form is None:
            return fallback, mods
        keep, window = form
        return self.name, mods.replace(mask=keep, window=window)

    def takes_one_pass(self, q, v) -> bool:
        return self.takes_values(q, v)

    def takes_values(self, q, v) -> bool:
        return v.shape[-1] == q.shape[-1]

    def rows(
        self, q, k, v, softmax_scale, mods, *, measure, blocks, with_lse, key_state, counted, spans=None
    ):
        from entropy_lens.kernels.triton_entropy import row_stats_triton

        check_score_range(q, k, softmax_scale, mods, self.name)
        splits = decode_splits(q, k, mods)
        if splits > 1:  # a decode step: the keys split over programs (triton_decode.py), then combined
            from entropy_lens.kernels.triton_decode import row_stats_split

            return row_stats_split(
                q, k, v, softmax_scale, mods, splits=splits, measure=measure, with_lse=with_lse
            )
        return row_stats_triton(q, k, v, softmax_scale, mods, measure=measure, with_lse=with_lse)

    def stream(self, q, k, v, softmax_scale, mods, *, extra=(), measure=DEFAULT_MEASURE, blocks=None):
        from entropy_lens.kernels.triton_entropy import stream_triton

        check_score_range(q, k, softmax_scale, mods, self.name)
        return stream_triton(q, k, v, softmax_scale, mods, extra=extra, measure=measure)

    def key_state(self, q, k, lse, softmax_scale, mods, blocks):
        from entropy_lens.kernels.triton_received import received_triton

        check_score_range(q, k, softmax_scale, mods, self.name)
        return received_triton(q, k, lse, softmax_scale, mods)


TABLE: dict[Backend, KernelBackend] = {b.name: b for b in (Reference(), TorchChunked(), Native(), Triton())}


def backend_of(kernel: Backend | str) -> KernelBackend:
    """The table's entry of a resolved backend.

    Args:
        kernel: a Backend other than AUTO, or its name.

    Returns:
        KernelBackend: what that kernel offers.

    Raises:
        ValueError: "auto" (resolve it first) or an unknown name.
    """
    entry = TABLE.get(Backend(kernel)) if kernel in {*TABLE, Backend.AUTO} else None
    if entry is None:
        names = ", ".join(TABLE)
        raise ValueError(
            f"{kernel!r} is no kernel: pass one of {names} (kernels.resolve_backend resolves 'auto')"
        )
    return entry


def resolve(backend: Backend, kind: str | None, one_pass: bool = False) -> Backend:
    """The kernel `backend` (parsed) names on device `kind` (None: only check the name): "auto" is triton on
    CUDA where triton is installed, else torch_chunked, or for a one pass on CPU native where it builds;
    another name is checked for `kind` (EntropyLensError naming the fix)."""
    if backend is Backend.AUTO:
        if kind == "cuda" and triton_available():
            return Backend.TRITON
        native = one_pass and kind == "cpu" and native_available()
        return Backend.NATIVE if native else Backend.TORCH_CHUNKED
    backend_of(backend).check(kind)
    return backend


def built_first(backend: Backend, one_pass: bool) -> bool:
    """Whether a run with --backend `backend` may run a kernel built on first use (native): named so, or
    "auto" with a one-pass route (where it builds, auto's one pass on CPU is native)."""
    return one_pass if backend is Backend.AUTO else backend_of(backend).built_on_first_use


def trains_on(backend: Backend, kind: str) -> bool:
    """Whether --backend `backend` has a training step's one pass on device `kind` ("cuda"; any other kind
    is the CPU's): auto everywhere; otherwise the backend's `train_device`."""
    device = "cuda" if kind == "cuda" else "cpu"
    return backend is Backend.AUTO or backend_of(backend).train_device == device


def train_kernel(backend: Backend, kind: str) -> Backend:
    """The kernel of a training step's one pass for --backend `backend` on device `kind` (where
    `trains_on`): auto is triton on CUDA, elsewhere native where it builds, else torch_chunked."""
    if backend is not Backend.AUTO:
        return backend
    if kind == "cuda":
        return Backend.TRITON
    return Backend.NATIVE if native_available() else Backend.TORCH_CHUNKED


__all__ = ["TABLE", "KernelBackend", "backend_of", "built_first", "resolve", "train_kernel", "trains_on"]
