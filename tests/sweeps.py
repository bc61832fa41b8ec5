"""Synthetic ScanResults and sweep folders, shared by the analysis, plotting, view and results tests
(pytest puts tests/ on sys.path, so test modules import it as `sweeps`).

    make_result(loss, ...)        a ScanResult with every required meta key, entropy zeros by default
    random_result(L, H, T, ...)   a ScanResult of random entropy growing as ln(i + 1) and noisy loss
    quadratic_sweep(a, L, T, s)   results of loss (s − s*(t))² + c, s*(t) = 1 + a ln(t/L), and s*
    save_sweep(folder, results)   the results saved as a sweep folder with its sweep.json
    sweep_folder(folder)          a quadratic sweep (a = 0.3, L = 64, T = 512, scales 0.8 ... 2.0) saved
    edit_index(folder, **changes) sweep.json with `changes` written over it
"""

from __future__ import annotations

import json

import numpy as np

from entropy_lens.results import REQUIRED_META, ScanResult, write_sweep_index


def make_result(
    loss,
    *,
    entropy=None,
    scale=1.0,
    scales=None,
    model="tiny",
    data="emma",
    train_len=64,
    config_hash="abc123",
    reduction="heads",
):
    """A ScanResult with every required meta key; entropy defaults to one (layer, head) of zeros."""
    loss = np.asarray(loss, dtype=np.float32)
    T = loss.shape[0]
    entropy = np.zeros((1, 1, T), np.float32) if entropy is None else np.asarray(entropy, np.float32)
    n_layers, n_heads = entropy.shape[:2]
    if scales is None:
        scales = np.full((n_layers, max(n_heads, 1)), scale).tolist()
    meta = dict.fromkeys(REQUIRED_META, "x")
    meta.update(
        schema_version=1,
        model=model,
        config_hash=config_hash,
        nope=True,
        head_dim=16,
        scales=scales,
        data=data,
        seed=0,
        samples=1,
        length=T,
        train_len=train_len,
        entropy_reduction=reduction,
        wall_time_s=0.0,
    )
    return ScanResult(
        entropy=entropy,
        entropy_sq=entropy**2,
        loss=loss,
        loss_sq=loss**2,
        count=np.ones(T, np.int64),
        meta=meta,
    )


def random_result(L=3, H=5, T=200, *, seed=0, scale=1.0, reduction="heads", train_len=50):
    """A ScanResult of L layers and H heads whose entropy is uniform(0, 1)·ln(i + 1) and whose loss is
    3 ± 0.3 nats, from `seed` (the plot functions' input)."""
    rng = np.random.default_rng(seed)
    entropy = rng.uniform(0, 1, (L, H, T)).astype(np.float32) * np.log(np.arange(T) + 1.0, dtype=np.float32)
    loss = (3 + rng.normal(0, 0.3, T)).astype(np.float32)
    return make_result(
        loss,
        entropy=entropy,
        scale=scale,
        model="m",
        data="d",
        train_len=train_len,
        config_hash="h",
        reduction=reduction,
    )


def save_sweep(folder, results, *, index_len=None):
    names = [f"s{uniform(r):g}.npz" for r in results]
    for r, name in zip(results, names):
        r.save(folder / name)
    write_sweep_index(
        folder,
        {
            "scales": [uniform(r) for r in results],
            "files": names,
            "model": "tiny",
            "length": index_len or results[0].length,
            "data": "emma",
            "samples": 1,
            "seed": 0,
            "entropy": "mean",
            "complete": True,
        },
    )
    return names


def uniform(result):
    return float(np.asarray(result.meta["scales"]).flat[0])


def quadratic_sweep(a, L, T, scales, c=2.0):
    """loss(t, s) = (s − s*(t))² + c with s*(t) = 1 + a ln(t/L) (s*(0) taken as 1)."""
    t = np.arange(T)
    s_star = 1 + a * np.log(np.maximum(t, 1) / L)
    return [make_result((s - s_star) ** 2 + c, scale=s, train_len=L) for s in scales], s_star


def sweep_folder(folder, *, model="tiny"):
    results, _ = quadratic_sweep(0.3, 64, 512, np.round(np.arange(0.8, 2.01, 0.1), 2))
    for r in results:
        r.meta["model"] = model
    folder.mkdir()
    save_sweep(folder, results)
    return folder


def edit_index(folder, **changes):
    index = json.loads((folder / "sweep.json").read_text())
    index.update(changes)
    (folder / "sweep.json").write_text(json.dumps(index))
    return index
