"""The grid the row statistics (tests/kernels/test_stats.py) and the key statistics (test_received.py) are
both held to their float64 definitions over, written once: the head layouts, the lengths, the masks,
causal or not, and the score modifiers (`MOD_CASES`), with the tolerance both use.

    @on_the_grid                         # parametrises Hq, Hkv, T, S, mask_kind, causal, case
    @pytest.mark.parametrize("kernel", ...)
    def test_...(kernel, Hq, Hkv, T, S, mask_kind, causal, case):
        kw = grid_kwargs(case, B, Hq, T, S, mask_kind, causal)   # the keywords every kernel takes
        ...
        assert_close_relative(got, want)

The builders it uses (`make_sinks`, `make_slopes`, `mask_kinds`) are tests/kernel_cases.py's.
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import make_sinks, make_slopes, mask_kinds

# the score modifiers of each case; the window applies to causal calls only (a window is causal)
MOD_CASES = {
    "plain": {},
    "sinks": {"sinks": True},
    "softcap+window": {"softcap": 2.5, "window": 5},
    "alibi+sinks": {"alibi": True, "sinks": True},
    "key_bias": {"key_bias": True},
}

# in the order the decorators would be written (top to bottom), applied bottom up as they would be
_GRID = (
    pytest.mark.parametrize("Hq,Hkv", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"]),
    pytest.mark.parametrize("T,S", [(21, 21), (9, 30), (14, 6)], ids=["square", "T<S", "T>S"]),
    pytest.mark.parametrize("mask_kind", ["none", "key_padding", "4d_per_head"]),
    pytest.mark.parametrize("causal", [True, False]),
    pytest.mark.parametrize("case", MOD_CASES),
)


def on_the_grid(test):
    """`test` parametrised over the grid (Hq, Hkv, T, S, mask_kind, causal, case)."""
    for mark in reversed(_GRID):
        test = mark(test)
    return test


def mod_kwargs(case: str, B: int, Hq: int, S: int, causal: bool) -> dict:
    """The score modifiers of `case` as keywords of the kernels' entry points."""
    spec = MOD_CASES[case]
    kw = {}
    if spec.get("sinks"):
        kw["sinks"] = make_sinks(Hq)
    if "softcap" in spec:
        kw["softcap"] = spec["softcap"]
    if "window" in spec and causal:
        kw["window"] = spec["window"]
    if spec.get("alibi"):
        kw["alibi_slopes"] = make_slopes(Hq, 0.5)
    if spec.get("key_bias"):
        kw["key_bias"] = torch.randn(B, Hq, S, generator=torch.Generator().manual_seed(5))
    return kw


def grid_kwargs(case: str, B: int, Hq: int, T: int, S: int, mask_kind: str, causal: bool) -> dict:
    """One grid point's keywords: its score modifiers, its mask and `causal`."""
    return mod_kwargs(case, B, Hq, S, causal) | {"mask": mask_kinds(B, Hq, T, S)[mask_kind], "causal": causal}


def assert_close_relative(got: dict, want: dict, tol=1e-5):
    """Each of `want`'s statistics in `got`: float32, the same shape, finite, and within `tol` relative to
    max(1, |value|)."""
    for name, values in want.items():
        assert got[name].dtype == torch.float32 and got[name].shape == values.shape, name
        assert torch.isfinite(got[name]).all(), name
        err = ((got[name] - values).abs() / values.abs().clamp_min(1.0)).max().item()
        assert err <= tol, (name, err)
