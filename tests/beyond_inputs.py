"""Binned row statistics with planted signals (Figure 17's inputs), shared by the plotting and figures
tests: every head's max probability holds at 0.5 inside L and falls as ((i + 1)/L)^−a beyond it, a = 1
for the `fast` head and 0.25 for the others; the `sink` head puts 0.5 on the first token (the others
0.05); every head looks back 0.3 i (the `far` head 0.45 i); varentropy steps from 1 to 1.5 nats² at L in
the `far` head; collision entropy is 0.8 of the entropy 0.5 ln(i + 1)."""

from __future__ import annotations

import numpy as np

from entropy_lens.analysis import StatCurves

UNITS = {
    "entropy": "nats",
    "max_prob": "probability",
    "collision_entropy": "nats",
    "varentropy": "nats²",
    "distance": "tokens",
    "first_mass": "probability",
}


def planted_curves(
    *,
    L: int = 16,
    T: int = 128,
    layers: int = 2,
    heads: int = 3,
    width: int = 2,
    fast=(1, 2),
    sink=(0, 1),
    far=(1, 0),
    model: str = "m",
    samples: int = 1,
    wall_time_s: float = 120.0,
) -> StatCurves:
    bins = -(-T // width)
    starts = np.arange(bins) * width
    p = (starts + np.minimum(starts + width, T) - 1) / 2.0  # the mean position of each bin
    shape = (layers, heads, bins)
    a = np.full((layers, heads, 1), 0.25)
    a[fast] = 1.0
    max_prob = 0.5 * np.where(p >= L, ((p + 1) / L), 1.0) ** -a
    first_mass = np.full(shape, 0.05)
    first_mass[sink] = 0.5
    distance = np.broadcast_to(0.3 * p, shape).copy()
    distance[far] = 0.45 * p
    varentropy = np.ones(shape)
    varentropy[far] = np.where(p >= L, 1.5, 1.0)
    entropy = np.broadcast_to(0.5 * np.log(p + 1), shape).copy()
    values = {
        "entropy": entropy,
        "max_prob": max_prob,
        "collision_entropy": 0.8 * entropy,
        "varentropy": varentropy,
        "distance": distance,
        "first_mass": first_mass,
    }
    meta = {
        "model": model,
        "stats": {k: v for k, v in UNITS.items() if k != "entropy"},
        "scan_config": {"first_keys": 1},
        "samples": samples,
        "data": "austen:persuasion",
        "dtype": "float32",
        "threads": 2,
        "backend": "torch_chunked",
        "wall_time_s": wall_time_s,
    }
    count = np.minimum(starts + width, T) - starts
    return StatCurves({k: v.astype(np.float32) for k, v in values.items()}, count * samples, width, T, meta)
