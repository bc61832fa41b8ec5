"""Tolerances from the dtype and the number of terms, never tighter (the project's rule, as flash-attention's:
a result is held to what its arithmetic can promise on every CPU, not to what one machine happened to give).

    sum_tolerance(n)                 relative (to max(1, |value|)) bound on two float32 evaluations of a
                                     sum of n non-negative terms, in different orders or tiles: n · eps
    float32_rounding                 one float64 value rounded to float32: eps (relative), twice the half-ulp

Why n · eps: a float32 sum of n terms carries |fl(Σx) − Σx| <= γ_{n−1} Σ|x|, γ_n = n·u/(1 − n·u),
u = eps/2 (Higham, Accuracy and Stability of Numerical Algorithms, §4.2); two evaluations compared
with each other differ by at most twice that, (n − 1)·eps·Σ|x|. A term that is itself computed (a
probability e^(s − lse), s a D-term dot product, lse a sum over the row's S keys) adds its own
error: count those terms too (`T + S + D` for a column sum of attention probabilities).
"""

import torch

EPS32 = torch.finfo(torch.float32).eps
float32_rounding = EPS32


def sum_tolerance(terms: int, dtype: torch.dtype = torch.float32) -> float:
    """The relative error (to max(1, |sum|), for terms of one sign) two evaluations of a sum of `terms`
    values rounded in `dtype` may differ by: terms · eps (module docstring)."""
    return max(int(terms), 1) * torch.finfo(dtype).eps
