"""The entropy an ALiBi head has from its bias alone: the scale its measured entropy is read against.

An ALiBi head adds −m·d to the score of a key d positions back. Were its q·k the same for every key,
its row i would attend with the geometric distribution p_d = e^(−m d)/Z over d = 0..i, whose entropy

    H_m(i) = ln Z + m·E[d],   Z = Σ_{d=0}^{i} e^(−m d)

rises like ln(i + 1) while i ≪ 1/m and levels off at H_m(∞) = −ln(1 − e^(−m)) + m e^(−m)/(1 − e^(−m))
(≈ 1 + ln(1/m) for small m). `alibi_prior_entropy` computes H_m(i) exactly (closed forms, float64).
"""

from __future__ import annotations

import numpy as np

__all__ = ["alibi_prior_entropy"]


def alibi_prior_entropy(slopes, length: int) -> np.ndarray:
    """(heads, length) float64 nats: H_m(i) for each slope m ≥ 0 (a head's `alibi_slopes`, as the model
    adds the bias: BLOOM/MPT slopes; Falcon's divided by √d) and each query position i < length;
    m = 0 gives ln(i + 1), the bound of a head without a position bias.

    Args:
        slopes: (heads,) ALiBi slopes m >= 0, finite, as the model adds them.
        length: the number of query positions.

    Returns:
        (heads, length) float64 entropy in nats.

    Raises:
        ValueError: a slope negative or not finite.
    """
    m = np.asarray(slopes, dtype=np.float64).reshape(-1, 1)
    if np.any(m < 0) or not np.all(np.isfinite(m)):
        raise ValueError(f"ALiBi slopes must be finite and >= 0; got {np.asarray(slopes).tolist()}")
    n = np.arange(1, length + 1, dtype=np.float64).reshape(1, -1)  # keys seen by row i: n = i + 1
    flat = m < 1e-12  # the closed forms below divide by 1 − r; there the prior is uniform
    mm = np.where(flat, 1.0, m)
    r = np.exp(-mm)
    rn = np.exp(-mm * n)  # r^n
    z = -np.expm1(-mm * n) / -np.expm1(-mm)  # (1 − r^n)/(1 − r)
    # Σ_{d<n} d r^d = r (1 − n r^(n−1) + (n − 1) r^n) / (1 − r)^2, written with r^n for stability
    mean_d = (r - n * rn + (n - 1) * rn * r) / ((1 - r) * (1 - rn))
    h = np.log(z) + mm * mean_d
    return np.where(flat, np.log(n), h)
