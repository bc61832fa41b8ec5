"""A vLLM request's statistics as one GenerationResult: the front end's manifest of what the request
returned (frontend.py) and each rank's rows (worker.py), merged: every rank's heads in the model's order,
every layer, the rows of the tokens returned (generated token k's row is position P − 1 + k)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from entropy_lens import __version__
from entropy_lens.errors import EntropyLensError
from entropy_lens.results.generation import GenerationResult
from entropy_lens.statistics import TOP_KEY_PROB
from entropy_lens.vllm.frontend import flush, request_folder
from entropy_lens.vllm.options import PARTS

__all__ = ["load"]


def load(out, request_id: str, *, wait: float = 60.0) -> GenerationResult:
    """The GenerationResult of the finished request `request_id` (the id vLLM returned: RequestOutput's
    `request_id`, the OpenAI response's `id`), its n sequences as the batch.

    Args:
        out: the folder given to `engine_args(out=...)`.
        request_id: the request's id.
        wait: seconds to wait for the workers' rows (they write a finished request's rows at their next
            step, just after the caller has its output).

    Returns:
        GenerationResult: tokens (n, N), each statistic (n, N, layers, heads): the request's n sequences
        as the batch (an OpenAI completion of several prompts: each prompt's n in turn).

    Raises:
        EntropyLensError: a request that did not opt in, was aborted or has not finished; rows missing.
    """
    children = []
    for folder in _folders(out, request_id):
        manifests = sorted(
            (json.loads(m.read_text()) for m in folder.glob("*.json")), key=lambda m: m["index"]
        )
        n = manifests[0]["n"]
        if len(manifests) != n:
            raise EntropyLensError(
                f"request {request_id!r}: {len(manifests)} of its n={n} sequences finished"
            )
        children += manifests
    merged = [_merged(Path(out), child, wait) for child in children]
    N = max(len(child["tokens"]) for child in children)
    names = list(merged[0][0])
    P = max(len(child["prompt"]) for child in children)
    values = {name: _batch([m[0][name] for m in merged], N) for name in names}
    prompt_values = {name: _batch([m[1][name] for m in merged], P) for name in merged[0][1]}
    tokens = _batch([np.asarray(child["tokens"], dtype=np.int64) for child in children], N)
    prompt = _batch([np.asarray(child["prompt"], dtype=np.int64) for child in children], P)
    meta0 = merged[0][2]
    meta = {
        "entropy_lens_version": __version__,
        "model": meta0.get("model", ""),
        "model_class": "vllm",
        "n_layers": meta0["n_layers"],
        "n_heads": meta0["n_heads"],
        "stats": [name for name in names if name != TOP_KEY_PROB],
        **meta0["recorded"],
        "backend": meta0.get("backend", ""),
        "attention_path": "vllm",
        "eos_token_id": None,
        "request_id": str(request_id),
    }
    return GenerationResult(
        tokens,
        values,
        np.asarray([len(child["prompt"]) for child in children], dtype=np.int64),
        np.asarray([len(child["tokens"]) for child in children], dtype=np.int64),
        meta,
        prompt,
        prompt_values,
    )


def _batch(rows: list[np.ndarray], length: int) -> np.ndarray:
    """Each sequence's rows (its own length, ...) as one (n, length, ...) block, padded with NaN (−1 ids)."""
    first = rows[0]
    block = np.full(
        (len(rows), length, *first.shape[1:]), np.nan if first.dtype.kind == "f" else -1, first.dtype
    )
    for b, r in enumerate(rows):
        block[b, : r.shape[0]] = r
    return block


def _fill(dtype) -> float | int:
    """What a block holds before every rank's rows are in it: NaN, or for ids (top_key) −2 (−1 is "no key")."""
    return np.nan if np.dtype(dtype).kind == "f" else -2


def _folders(out, request_id: str) -> list[Path]:
    """The manifest folders of `request_id`: its own, or, for the OpenAI server's completions (whose
    engine requests are the response's id with -0, -1, ... per prompt), each prompt's in order."""
    folder = request_folder(out, request_id)
    if folder.is_dir() and any(folder.glob("*.json")):
        return [folder]
    folders = []
    while (prompt := request_folder(out, f"{request_id}-{len(folders)}")).is_dir() and any(
        prompt.glob("*.json")
    ):
        folders.append(prompt)
    if not folders:
        raise EntropyLensError(
            f"no statistics of request {request_id!r} in {out}: it did not opt in "
            "(SamplingParams(extra_args=entropy_lens.vllm.request(...))), was aborted, or has not finished"
        )
    return folders


def _merged(out: Path, child: dict, wait: float) -> tuple[dict, dict, dict]:
    """One sequence's rows, every rank's merged: of its returned tokens {name: (N, layers, heads[, values])},
    of its prompt (P, ...) where it asked for them ({} else); and the first rank's meta."""
    folder = out / PARTS / child["request_id"]
    deadline, flushed = time.monotonic() + wait, False
    while len(parts := sorted(folder.glob("rank*.npz"))) < child["ranks"]:
        if not flushed:  # an engine this process steps: no later step writes them
            flush(out, [child["request_id"]])
            flushed = True
            continue
        if time.monotonic() > deadline:
            raise EntropyLensError(
                f"request {child['external_id']!r}: {len(parts)} of {child['ranks']} ranks wrote its rows to "
                f"{folder} within {wait:g} s; is the engine still running? load again, or pass wait="
            )
        time.sleep(0.05)
    tokens, P = child["tokens"], len(child["prompt"])
    loaded = []  # each rank's part read once: (meta, its arrays)
    for part in parts:
        with np.load(part) as z:
            loaded.append((json.loads(str(z["meta"])), {name: z[name] for name in z.files if name != "meta"}))
    for meta, _ in loaded:
        if meta["refused"]:
            raise EntropyLensError(
                f"request {child['external_id']!r}: no statistics, refused in rank {meta['rank']}: {meta['refused']}"
            )
    generated = _rows(loaded, child, np.arange(P - 1, P - 1 + len(tokens)))
    meta = loaded[0][0]
    prompt = _rows(loaded, child, np.arange(P)) if meta["prompt_rows"] else {}
    return generated, prompt, meta


def _rows(loaded: list[tuple[dict, dict]], child: dict, wanted: np.ndarray) -> dict[str, np.ndarray]:
    """{name: (len(wanted), layers, heads[, values])}: the rows at positions `wanted`, every rank's heads
    and layers in the model's order."""
    tokens = child["tokens"]
    out_rows: dict[str, np.ndarray] = {}
    for meta, z in loaded:
        positions = z["positions"]
        where = np.searchsorted(positions, wanted)
        if len(wanted) and (where.max(initial=0) >= len(positions) or (positions[where] != wanted).any()):
            why = (
                f"vLLM served positions up to {meta['cached_prefix']} from its prefix cache, whose keys "
                "never reached the layers; start the engine with enable_prefix_caching=False"
                if meta["cached_prefix"]
                else "was it preempted and never recomputed?"
            )
            raise EntropyLensError(
                f"request {child['external_id']!r}: rank {meta['rank']} holds no row for some of "
                f"positions {wanted[0]}..{wanted[-1]} ({len(tokens)} returned tokens): {why}"
            )
        for name in meta["stats"]:
            rows = z[name][where]  # (N, local layers, local heads[, values])
            shape = (len(wanted), meta["n_layers"], meta["n_heads"], *rows.shape[3:])
            block = out_rows.setdefault(name, np.full(shape, _fill(rows.dtype), rows.dtype))
            h = meta["head_start"]
            block[:, meta["layers"], h : h + rows.shape[2]] = rows
    for name, block in out_rows.items():
        missing = np.isnan(block) if block.dtype.kind == "f" else block == _fill(block.dtype)
        if len(block) and missing.any():
            raise EntropyLensError(
                f"request {child['external_id']!r}: {name} lacks some layer or head of the model in its ranks' rows"
            )
    return out_rows
