"""The streaming step of torch_chunked, one score tile into the running softmax state, and an opt-in
compiled form for CPU.

    fold(s, m, l, u) -> (m', l', u', e, α)
    s      (rows, bk) float32 scores of one key block, masked entries −inf; consumed (eager: its
           buffer holds e·(s − m'') afterwards)
    m l u  (rows,)    float32 state of the rows so far (m = −inf, l = u = 0 before any key)
    m'     the new running max; e = e^(s − m'') (rows, bk) with m'' = m' or 0 while m' = −inf (the
           tile's probabilities up to 1/l, for the output's e·V); α = e^(m − m'') rescales the
           old l, u and the output accumulator
    l' = α l + Σ e,   u' = α (u + (m − m'') l) + Σ e (s − m'')   (0 · (−inf) read as 0)
See torch_chunked.py for the math. The eager function is the definition and the default.
ENTROPY_LENS_COMPILE=1 makes `fold_for` return `torch.compile(fold, dynamic=True)` for CPU tiles of
at least COMPILE_MIN scores: one C++ loop instead of five passes; opt-in, as it has not been found
faster on CPU (docs/internals/kernels.md). If compiling fails (no C++ compiler) it falls back to eager, with a
warning; `fold_status()` says which ran and why, and scans record it in their metadata. Tests hold
both to the float64 reference and to each other.
The compiled fold and that status live in a `FoldState`: one per process (`PROCESS_FOLD`) unless a
caller passes its own, as tests do (with an injected `compile`, e.g. one that fails).
"""

from __future__ import annotations

import os
import warnings

import torch

ENV_VAR = "ENTROPY_LENS_COMPILE"  # "1": compile the fold for CPU tiles; anything else (default): eager
COMPILE_MIN = 1 << 16  # scores per tile from which the compiled fold runs


class FoldState:
    """The compiled fold (built on first use) and what ran last on CPU (`status`, see `fold_status`).
    `compile(fn, dynamic=True)` builds the compiled fold: torch.compile unless given."""

    def __init__(self, *, compile=None):
        self.compile = compile or torch.compile
        self.compiled: CompiledFold | None = None
        self.status = "not used"


def fold(s, m, l, u):
    """One tile into the state; see the module docstring for the contract."""
    m_new = torch.maximum(m, s.amax(-1))
    m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # no key seen yet
    alpha = torch.exp(m - m_safe)  # 0 while m = −inf
    shift = torch.where(l > 0, (m - m_safe) * l, torch.zeros_like(l))  # the old terms' centre moves
    if torch.compiler.is_compiling():  # one fused loop over the tile: no temporaries are stored
        d = s - m_safe.unsqueeze(-1)
        e = torch.exp(d)
        ed = torch.where(e > 0, e * d, torch.zeros_like(d))
    else:  # eager: in place in s's buffer, one tile-sized temporary (e)
        d = s.sub_(m_safe.unsqueeze(-1))
        e = torch.exp(d)
        ed = d.mul_(e).nan_to_num_(nan=0.0)  # masked: e = 0, d = −inf, and 0 · (−inf) reads 0
    l_new = alpha * l + e.sum(-1)
    u_new = alpha * (u + shift) + ed.sum(-1)
    return m_new, l_new, u_new, e, alpha


def compile_requested() -> bool:
    """Whether ENTROPY_LENS_COMPILE=1 asks for the compiled CPU fold (compiled on its first call)."""
    return os.environ.get(ENV_VAR, "0") == "1"


def fold_for(s: torch.Tensor, state: FoldState | None = None):
    """The fold to run on the (rows, bk) tile `s`: eager, or compiled for CPU tiles of at least
    COMPILE_MIN scores when ENTROPY_LENS_COMPILE=1 (smaller ones cost less than the guards).
    `state`: where the compiled fold and the status live (None: PROCESS_FOLD)."""
    state = state or PROCESS_FOLD
    if s.device.type != "cpu":
        return fold
    if not compile_requested():
        state.status = "eager"
        return fold
    if s.numel() < COMPILE_MIN:
        if state.status == "not used":
            state.status = "eager"
        return fold
    return compiled(state)


def compiled(state: FoldState | None = None) -> CompiledFold:
    """`state`'s compiled fold (None: the process's), built on first use (`dynamic=True`: one graph
    for all sizes)."""
    state = state or PROCESS_FOLD
    if state.compiled is None:
        state.compiled = CompiledFold(state)
    return state.compiled


def fold_status(state: FoldState | None = None) -> str:
    """How the CPU tiles ran: "eager", "compiled" (ENTROPY_LENS_COMPILE=1; tiles below COMPILE_MIN stay
    eager) or "eager (torch.compile failed: ...)"; "not used" before any CPU tile. `state`: None for
    the process's.

    Args:
        state: where the compiled fold and its status live; None: the process's.

    Returns:
        str: the status, as above.
    """
    return (state or PROCESS_FOLD).status


class CompiledFold:
    """`state.compile(fold)` that falls back to eager for good, with the reason, if compiling fails;
    each call records in `state.status` which ran."""

    def __init__(self, state: FoldState):
        self.state = state
        self.fn = state.compile(fold, dynamic=True)
        self.failed: str | None = None

    def __call__(self, s, m, l, u):
        if self.failed is None:
            try:
                out = self.fn(s, m, l, u)
                self.state.status = "compiled"
                return out
            except (RuntimeError, OSError) as err:  # compile errors (no C++ compiler): eager, for good
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                self.failed = f"eager (torch.compile failed: {type(err).__name__}: {first})"
                warnings.warn(
                    f"entropy_lens: {self.failed}; the CPU entropy pass runs uncompiled", stacklevel=2
                )
        self.state.status = self.failed
        return fold(s, m, l, u)


PROCESS_FOLD = FoldState()  # callers that pass no state of their own: one per process
