"""passkey(config, out=F): passkey retrieval (the paper's Figures 6, 8 and 9) with the attention at the
needle measured.

For each window length W, depth k/N (N = `depths`) and trial t < `keys`: a prompt (data/passkey.py)
whose key and needle position come from a generator seeded with (seed, W, k, t), so a resumed or
partial run draws the same trials (the paper draws them in sequence from one generator seeded 42);
greedy decoding of as many tokens as the answer has, with the KV cache, inside the variant's
`ScaleSession` (--scale, --head-scales, --scale-schedule; --nope, --rope-scaling at loading); exact
match of the tokens. While it decodes, each layer's answer rows (the last prompt row, then each
generated token's row) are read whole (the session's consumer's `report_rows`, capture/reports.py: the float64 probabilities of
`kernels.attention_probabilities`, no T × T matrix): per layer and head their mean entropy (nats,
a sink's share counted as for the scans) and the probability mass they put on the key's tokens in the
needle (both mentions).

The record (JSON, written atomically after every (length, depth) cell; rerunning the same command
continues it, other settings are refused unless `force`; a damaged one is refused in one line): kind,
config (its --head-scales file, and the model's "scales" naming it, relative to the record's folder: a
record moved or committed with that file names no machine's path; the model's "model_source" likewise,
or a bundled model's place among the packages: runs/provenance.py's `model_facts`), provenance, the model's facts (with the class that ran, and the auto_map class that did not when
the checkpoint names remote code that was not trusted) and "results", one entry per cell in order:
    {"length": W, "depth": k/N, "correct": c, "trials": n, "accuracy": c/n, "position": mean needle
     token, "wall_s": seconds the cell took, "per_trial": [{"key", "position", "answer" (decoded), "answer_ids", "correct",
     "entropy": [layers][heads],
     "needle_mass": [layers][heads], "retrieval_score": [layers][heads]}, ...]}
"retrieval_score" is Wu et al.'s (2024): per head, the answer tokens whose row's most probable key lies
in the needle sentence and holds the very token written, over the needle's length (records written
before it have none: `analysis.retrieval_heads` says so).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from entropy_lens.analysis.passkey import RETRIEVAL_SCORE, check_passkey_record
from entropy_lens.capture import ScaleSession
from entropy_lens.capture.reports import Reports
from entropy_lens.data.passkey import check_tokenizer, passkey_prompt, random_key
from entropy_lens.errors import EntropyLensError
from entropy_lens.models import resolve_device, resolve_dtype
from entropy_lens.results import atomic_write_text
from entropy_lens.results.files import beside_record
from entropy_lens.runs.configs import PasskeyConfig
from entropy_lens.runs.lock import OutputLock
from entropy_lens.runs.output import check_file_target, save_or_rescue
from entropy_lens.runs.provenance import model_facts, provenance, recorded_settings, settings_files
from entropy_lens.runs.scan import attention_scales, load_variant, variant_schedule
from entropy_lens.statistics import ENTROPY, PROBABILITY

__all__ = ["PASSKEY_KIND", "PasskeyConfig", "passkey"]

PASSKEY_KIND = "entropy_lens.passkey"  # the `kind` of the JSON `entropy-lens passkey --out` writes


def passkey(
    config: PasskeyConfig, *, out: str | Path | None = None, force: bool = False, progress: bool = True
) -> dict:
    """The record (module docstring); with `out`, written there after every cell and continued from
    what is there when it holds a run of these settings.

    Args:
        config: the run's settings.
        out: the record's file (.json), written after every cell; None: nothing written.
        force: start over, ignoring what `out` holds (without it, a record of other settings is refused).
        progress: show a progress bar.

    Returns:
        dict: the record (the module docstring): config, provenance, model, units and the results per
        length and depth.

    Raises:
        EntropyLensError: settings that cannot run, a target that is not a file, or an `out` holding a
            run of other settings without force.
    """
    config.check()
    path = None if out is None else check_file_target(out, example="passkey.json")
    with OutputLock(path) if path is not None else contextlib.nullcontext():
        kept = _kept_cells(path, config, force)
        device = resolve_device(config.device)
        dtype = resolve_dtype(config.dtype, device)
        lm = load_variant(config, device, dtype)
        check_tokenizer(lm.tokenizer)
        scales, scale_source = attention_scales(config, lm)
        if path is not None and config.scale is None and config.head_scales is not None:
            scale_source = beside_record(config.head_scales, path)  # the file, named from the record
        schedule = variant_schedule(config, lm)
        session = {"scales": scales, "schedule": schedule}
        record = {
            "kind": PASSKEY_KIND,
            "config": recorded_settings(config.to_dict(), path),
            "provenance": provenance(),
            "model": {
                **model_facts(lm, path),
                "train_len": config.train_len if config.train_len is not None else lm.train_len,
                "scales": scale_source,
                "device": str(device),
                "dtype": str(dtype).removeprefix("torch."),
                "threads": torch.get_num_threads(),
            },
            "units": {
                ENTROPY.name: ENTROPY.unit,
                "needle_mass": PROBABILITY,
                RETRIEVAL_SCORE: "needle tokens",
            },
            "results": [],
        }
        if kept and kept["model"]["config_hash"] != lm.config_hash:
            raise EntropyLensError(
                f"{path} was made with another checkpoint under the name {config.model}; pass --force to "
                "overwrite it, or another --out"
            )
        cells = [(w, k) for w in config.lengths for k in range(config.depths)]
        for i, (length, k) in enumerate(cells):
            cell = (kept or {}).get("cells", {}).get((length, k))
            if cell is None:
                cell = _cell(lm, session, config, length, k, device)
            record["results"].append(cell)
            if path is not None:
                text = json.dumps(record, indent=1, sort_keys=True) + "\n"
                save_or_rescue(path, lambda p, text=text: atomic_write_text(p, text), what="passkey results")
            if progress:
                print(
                    f"[{i + 1}/{len(cells)}] len {length} depth {cell['depth']:.0%}: "
                    f"{cell['correct']}/{cell['trials']}",
                    flush=True,
                )
    return record


def _kept_cells(path: Path | None, config: PasskeyConfig, force: bool) -> dict | None:
    """{"model": ..., "cells": {(length, depth index): cell}} of a record of these settings at `path`,
    None when there is none (or `force`); EntropyLensError for a record of other settings."""
    if path is None or force or not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or record.get("kind") != PASSKEY_KIND:
        raise EntropyLensError(
            f"{path} exists and is not an entropy-lens passkey record; pass --force to overwrite it, or another --out"
        )
    ours = settings_files(recorded_settings(config.to_dict(), path), path)
    if settings_files(record.get("config"), path) != ours:
        raise EntropyLensError(
            f"{path} holds a passkey run with other settings; rerun with the same flags to continue it, pass "
            "--force to overwrite it, or another --out"
        )
    fix = "pass --force to run it again from the start, or another --out"
    check_passkey_record(record, source=str(path), fix=fix)  # every cell kept must be whole
    model = record.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("config_hash"), str):
        raise EntropyLensError(f'{path} is damaged: "model" has no config_hash; {fix}')
    cells = {(c["length"], round(c["depth"] * config.depths)): c for c in record["results"]}
    return {"model": model, "cells": cells}


def _cell(lm, session: dict, config: PasskeyConfig, length: int, k: int, device) -> dict:
    started = time.perf_counter()
    trials = []
    for t in range(config.keys):
        rng = np.random.default_rng([config.seed, length, k, t])
        key = random_key(rng)
        prompt = passkey_prompt(
            lm.tokenizer, length=length, depth=k / config.depths, key=key, rng=rng, width=1 / config.depths
        )
        trials.append(_trial(lm, session, prompt, device))
    correct = sum(t["correct"] for t in trials)
    return {
        "length": length,
        "depth": k / config.depths,
        "correct": correct,
        "trials": len(trials),
        "accuracy": correct / len(trials),
        "position": float(np.mean([t["position"] for t in trials])),
        "per_trial": trials,
        "wall_s": round(time.perf_counter() - started, 3),
    }


class _AnswerRows(Reports):
    """A trial's consumer (capture/reports.py): each layer's answer row, whole (`probe_rows` 1), read into
    per layer and head its entropy and the mass on the needle's key tokens (each a mean over the answer's
    tokens) and its most probable key (the last row's); `tokens`: the answer so far, the trial's."""

    probe_rows = 1

    def __init__(self, prompt, n_layers: int, n_heads: int, device):
        self.prompt, self.device, self.n = prompt, device, len(prompt.answer)
        self.entropy, self.mass = np.zeros((n_layers, n_heads)), np.zeros((n_layers, n_heads))
        self.top = np.zeros((n_layers, n_heads), dtype=np.int64)
        self.tokens: list[int] = []

    def report_rows(self, layer: int, p: torch.Tensor) -> None:  # p (1, Hq, 1, S) float64: this step's row
        prompt, n = self.prompt, self.n
        row = p[0, :, -1]
        sink = (1.0 - row.sum(-1)).clamp_min(0.0)  # a sink's share (0 without sinks)
        h = -torch.special.xlogy(row, row).sum(-1) - torch.special.xlogy(sink, sink)
        self.entropy[layer] += h.cpu().numpy() / n
        # the S keys are the positions up to this row's (a sliding-window layer's cache keeps the last W)
        first = len(prompt.ids) + len(self.tokens) - row.shape[-1]
        needle = prompt.key_positions[prompt.key_positions >= first] - first
        self.mass[layer] += row[:, torch.from_numpy(needle).to(self.device)].sum(-1).cpu().numpy() / n
        self.top[layer] = (
            first + row.argmax(-1).cpu().numpy()
        )  # each head's most probable key (ties: earliest)


def _trial(lm, session: dict, prompt, device) -> dict:
    """Greedy decoding of len(answer) tokens; each layer's answer rows read as they run."""
    n = len(prompt.answer)
    rows = _AnswerRows(prompt, lm.n_layers, lm.n_heads, device)
    entropy, mass, top, tokens = rows.entropy, rows.mass, rows.top, rows.tokens
    retrieval = np.zeros((lm.n_layers, lm.n_heads))
    scaling = ScaleSession(lm.model, **session)
    scaling.session.reports = rows
    with scaling, torch.no_grad():
        out = lm.model(torch.from_numpy(prompt.ids)[None].to(device), use_cache=True)
        for step in range(n):
            token = out.logits[0, -1].argmax()
            tokens.append(int(token))
            # Wu et al.'s retrieval: the head's most probable key lies in the needle and holds the token
            written = np.concatenate([prompt.ids, tokens])
            inside = (top >= prompt.needle_start) & (top < prompt.needle_stop)
            retrieval += (inside & (written[top] == tokens[-1])) / (prompt.needle_stop - prompt.needle_start)
            if step + 1 < n:
                out = lm.model(token.view(1, 1), past_key_values=out.past_key_values, use_cache=True)
    return {
        "key": prompt.key,
        "position": prompt.needle_start,
        "answer": lm.tokenizer.decode(tokens),
        "answer_ids": tokens,
        "correct": tokens == prompt.answer.tolist(),
        ENTROPY.name: np.round(entropy, 6).tolist(),
        "needle_mass": np.round(mass, 6).tolist(),
        RETRIEVAL_SCORE: np.round(retrieval, 6).tolist(),
    }
