"""A generation (results/generation.py's `GenerationResult`: `entropy-lens generate --out`,
`GenerationRecorder(...).result()`) as the page draws it: the text written, token by token, and for the
chosen sequence, head and statistic the value of every generated token's row (generation.js).

Per generation: its meta (GENERATION_FIELDS), `layers`, `heads`, `steps` (N, the generated tokens'
slots), and per sequence b (`rows`) its real prompt ids (null in a version 1 file), its N generated ids
(−1 after its end), its `length` (live tokens, its end token included) and `prompt_len`; `texts`, the
text of each id it holds ({id: text}, meta token_texts: `GenerationResult.with_token_texts`), or null
where none was recorded (the page shows ids). The values, one entry per array of the file, row-major:

    values[name]   float32 (B, N, layers, heads, slots) base64; slots 1 for a row statistic, the slots
                   of a row-slice statistic (spans, offsets, bins; top_key_prob's ranks); NaN after a
                   sequence ended
    top_key        int32 (B, N, layers, heads, k) base64: the k most probable keys' real positions, −1
                   where none (after a sequence ended, past the keys a row sees)
    slices         per row-slice statistic held with named slots: its array, label and slots' names
                   (the hovered token's detail lists them)

`stats` lists what the statistic menu offers, in the file's order: each row statistic (entropy in bits,
the others in their units, as the head explorer shows them), then each row-slice statistic of
probabilities per slot (per span, offset or distance bin: `GenerationResult.slots`) and
top_key_prob per rank, each naming its array and slot. A token after its sequence's end has
NaN there, drawn as "ended" (a gap, never a number).
"""

from __future__ import annotations

import numpy as np

from entropy_lens.results.generation import PROBS, TOP_KEY_PROB, GenerationResult
from entropy_lens.statistics import (
    ENTROPY,
    PROBABILITY,
    ROW_PARAMETERS,
    ROW_SLICE_STATISTICS,
    SLICE_PARAMETERS,
    STATISTICS,
    TOP_KEY,
)
from entropy_lens.view.encode import b64, text
from entropy_lens.view.sources import GenerationItem

__all__ = ["GENERATION_FIELDS", "generation_payload", "menu"]

GENERATION_FIELDS = (  # shown in the generation's table, in this order, where its meta has them
    "model",
    "model_class",
    "n_layers",
    "n_heads",
    "stats",
    *ROW_PARAMETERS,  # the row statistics' parameters
    *SLICE_PARAMETERS,  # the row-slice statistics' (spans, offsets, top_keys, ...)
    "backend",
    "attention_path",
    "eos_token_id",
    "entropy_lens_version",
    "schema_version",
)
LN2 = float(np.log(2.0))


def menu(g: GenerationResult) -> list[dict]:
    """The statistic menu of `g` (the module docstring): {name, label, unit, description, array, slot,
    factor, range} per entry; factor turns the stored value into `unit` (entropy: nats to bits)."""
    entries = []
    for name in g.stats:
        if name in ROW_SLICE_STATISTICS:
            continue
        info = STATISTICS[name]
        factor, unit = (1 / LN2, "bits") if name == ENTROPY.name else (1.0, info.unit)
        entries.append(_entry(name, name, unit, info.description, name, 0, factor))
    ranks = g.values[TOP_KEY_PROB].shape[-1] if TOP_KEY_PROB in g.values else 0
    slices = [  # (array, what one of its slots is, the slots' names): a probability per slot
        (name, stat.description, [stat.sliced.slot.format(label) for label in g.slots(name)])
        for name, stat in ROW_SLICE_STATISTICS.items()
        if stat.unit == PROBABILITY
    ]
    slices.append(
        (
            TOP_KEY_PROB,
            "the probability of the row's k-th most probable key",
            [f"rank {k + 1}" for k in range(ranks)],
        )
    )
    for array, what, parts in slices:
        if array in g.values:
            for slot, part in enumerate(parts):
                entries.append(
                    _entry(f"{array}[{slot}]", f"{array}: {part}", PROBABILITY, what, array, slot, 1.0)
                )
    return entries


def _entry(name, label, unit, description, array, slot, factor) -> dict:
    return {
        "name": text(name),
        "label": text(label),
        "unit": text(unit),
        "description": text(description),
        "array": text(array),
        "slot": slot,
        "factor": factor,
        "range": [0, 1] if unit == PROBABILITY else None,
    }


def generation_payload(item: GenerationItem) -> dict:
    """The JSON-ready dict of one generation (see the module docstring)."""
    g = item.generation
    B, N = g.tokens.shape
    first = next(iter(g.values.values()), None)
    layers, heads = (
        (first.shape[2:4]) if first is not None else (g.meta.get("n_layers", 0), g.meta.get("n_heads", 0))
    )
    entries = menu(g)
    values = {}
    for array in dict.fromkeys(e["array"] for e in entries):
        v = np.asarray(g.values[array], dtype=np.float64)
        v = v.reshape(*v.shape[:4], -1)  # a row statistic: one slot
        factor = next(e["factor"] for e in entries if e["array"] == array)
        values[array] = b64(np.where(g.live[:, :, None, None, None], v * factor, np.nan).astype(np.float32))
    texts = g.token_texts
    out = {
        "label": text(item.label),
        "source": text(item.source),
        "meta": _meta_rows(g.meta),
        "layers": int(layers),
        "heads": int(heads),
        "steps": int(N),
        "rows": [
            {
                "prompt": None if g.prompt is None else g.prompt[b, : int(g.prompt_len[b])].tolist(),
                "tokens": g.tokens[b].tolist(),
                "length": int(g.lengths[b]),
                "prompt_len": int(g.prompt_len[b]),
            }
            for b in range(B)
        ],
        "texts": {str(i): text(t) for i, t in texts.items()} if texts else None,
        "stats": entries,
        "values": values,
        "top_key": None,
        "top_keys": 0,
        "slices": [  # the hovered token's row-slice statistics, each slot named
            {"array": text(name), "label": text(stat.label), "parts": [text(p) for p in parts]}
            for name, stat in ROW_SLICE_STATISTICS.items()
            if name in g.values and (parts := [stat.sliced.slot.format(s) for s in g.slots(name)])
        ],
        "notes": [],
    }
    if TOP_KEY.name in g.values:
        keys = np.where(g.live[:, :, None, None, None], g.values[TOP_KEY.name], -1)
        out["top_key"] = b64(keys.astype(np.int32))
        out["top_keys"] = int(keys.shape[-1])
    if not texts:
        out["notes"].append(
            "no token texts recorded (meta token_texts): tokens are shown by id; record them with "
            "result.with_token_texts(tokenizer), as entropy-lens generate does"
        )
    if g.prompt is None:
        out["notes"].append("a version 1 file: no prompt ids, so a top key in the prompt has no text")
    if not entries:
        out["notes"].append("no statistic recorded: only the text is shown")
    if PROBS in g.values:
        out["notes"].append("the kept probabilities (keep_probs) are not drawn")
    return out


def _meta_rows(meta: dict) -> dict[str, str]:
    """The table's rows: GENERATION_FIELDS the meta has, a statistic's parameter (first_keys, recent_keys)
    only where a recorded statistic reads it (the recorder keeps every parameter's value)."""
    read = {
        p.name for name in meta.get("stats", ()) if name in STATISTICS for p in STATISTICS[name].parameters
    }
    rows = {}
    for key in GENERATION_FIELDS:
        if key in ROW_PARAMETERS and key not in read:
            continue
        if key in meta:
            value = meta[key]
            if isinstance(value, dict):
                value = ", ".join(f"{k}: {v}" for k, v in value.items())
            elif isinstance(value, list):
                value = ", ".join(map(str, value))
            rows[key] = text(value)
    return rows
