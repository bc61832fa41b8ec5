"""Results with planted per-head signals for the view's tests (test_view.py, test_view_browser.py).

Head (l, h) has entropy, in bits, b + k·ln(i + 1) + d·[i ≥ L] with b, k, d known per head, so its
converged mean, growth ([L, 2L) minus [L/2, L)) and slope in ln i (= k over [L, T)) are known exactly;
d = −0.2, −0.1, 0, 0.1, 0.2, 0.3 in (layer, head) order; with `jump=True` head (0, 0) has no step but
jumps by 1.5 bits at 1.5L instead: departures `find_inflection` must place at L and at 1.5L.
The per-position sd over samples is 0.01 nats (entropy_sq), one sample per position.

`with_stats` adds the row statistics of `scan --stats all` (and sink_mass), each planted so that its
per-head statistics are known: max_prob = c + 0.1·[i ≥ L] (head (0, 0) also jumps by 0.3 at 1.5L),
collision_entropy = b + k·ln(i + 1) nats, distance = a·i tokens, first_mass and sink_mass constant,
varentropy = 1 + 0.01·h nats².

`with_keys` adds the key statistics of `scan --stats received,received_max,received_mean` (attention
received by key position j): key 0 is a sink receiving 2·T/(h + 1) of the mass while key j > 0 receives
(0.5 + h)/(j + 1), orders of magnitude less; head (1, 2) receives 0 at keys [40, 80), keys that no counted
row attends; received_max and received_mean are scaled alike (÷ 2 and ÷ T).

`generated()` is a generation of the bundled tiny-nope with every row-slice statistic and its token
texts, one sequence of two ended early (test_view_generation.py, its browser test).

`page_data(page)` reads back the data a view page carries (its `entropy-lens-data` script element).
"""

from __future__ import annotations

import json
import re

import numpy as np

from entropy_lens.results import REQUIRED_META, ScanResult

LN2 = float(np.log(2.0))


def planted(layers=2, heads=3, T=256, L=64, *, shift=0.0, jump=False, model="tiny-nope") -> ScanResult:
    i = np.arange(T)
    base = np.arange(layers * heads, dtype=np.float64).reshape(layers, heads, 1) * 0.25 + shift
    slope = np.linspace(0.0, 0.5, layers * heads).reshape(layers, heads, 1)
    step = np.linspace(-0.2, 0.3, layers * heads).reshape(layers, heads, 1)  # head (0, 2): no step
    if jump:
        step[0, 0] = 0.0
    bits = base + slope * np.log(i + 1.0) + step * (i >= L)
    if jump:
        bits[0, 0] += 1.5 * (i >= L + L // 2)
    entropy = (bits * LN2).astype(np.float32)
    loss = (3.0 + 0.5 * np.sin(i / 7.0) + 0.002 * i).astype(np.float32)
    return ScanResult(
        entropy=entropy,
        entropy_sq=(entropy.astype(np.float64) ** 2 + 0.01**2).astype(np.float32),
        loss=loss,
        loss_sq=loss**2,
        count=np.ones(T, np.int64),
        meta=_meta(model, T, L, layers, heads),
    )


def with_stats(r: ScanResult, L: int, *, first_keys: int = 2) -> ScanResult:
    """`r` with every row statistic (see the module docstring) and its mean square (none for sink_mass),
    the units in meta `stats` and K in `first_keys`, as `scan --stats all` writes them."""
    layers, heads, T = r.entropy.shape
    i = np.arange(T, dtype=np.float64)
    h = np.arange(layers * heads, dtype=np.float64).reshape(layers, heads, 1)
    max_prob = 0.05 + 0.02 * h + 0.1 * (i >= L) + 0 * i
    max_prob[0, 0] += 0.3 * (i >= L + L // 2)
    planted = {
        "sink_mass": 0.01 * (h + 1) + 0 * i,
        "max_prob": max_prob,
        "collision_entropy": 0.1 * h
        + np.linspace(0.2, 0.7, layers * heads).reshape(layers, heads, 1) * np.log(i + 1.0),
        "varentropy": 1.0 + 0.01 * h + 0 * i,
        "distance": np.linspace(0.1, 0.6, layers * heads).reshape(layers, heads, 1) * i,
        "first_mass": 0.2 + 0.01 * h + 0 * i,
    }
    for name, values in planted.items():
        r.stats[name] = values.astype(np.float32)
        if name != "sink_mass":
            r.stats[name + "_sq"] = (values**2 + 0.01**2).astype(np.float32)
    units = {"entropy": "nats", "collision_entropy": "nats", "varentropy": "nats²", "distance": "tokens"}
    r.meta["stats"] = {name: units.get(name, "probability") for name in ("entropy", *planted)}
    r.meta["first_keys"] = first_keys
    return r


ZERO_HEAD, ZERO_KEYS = (1, 2), (40, 80)  # with_keys: the head whose keys [40, 80) receive 0


def with_keys(r: ScanResult, *, query_window: int | None = None) -> ScanResult:
    """`r` with every key statistic (see the module docstring) and the mean squares a scan writes
    (received_sq, received_mean_sq), their units in meta `stats`, and meta `query_window` where given."""
    layers, heads, T = r.entropy.shape
    j = np.arange(T, dtype=np.float64)
    h = np.arange(layers * heads, dtype=np.float64).reshape(layers, heads, 1)
    received = np.where(j == 0, 2.0 * T / (h + 1), (0.5 + h) / (j + 1))
    received[ZERO_HEAD][ZERO_KEYS[0] : ZERO_KEYS[1]] = 0.0
    planted = {"received": received, "received_max": received / 2, "received_mean": received / T}
    for name, values in planted.items():
        r.stats[name] = values.astype(np.float32)
        if name != "received_max":
            r.stats[name + "_sq"] = (values**2).astype(np.float32)
    r.meta["stats"] = {**r.meta.get("stats", {"entropy": "nats"}), "received": "attention"}
    r.meta["stats"].update(received_max="probability", received_mean="probability")
    if query_window is not None:
        r.meta["query_window"] = query_window
    return r


def _meta(model, T, L, layers, heads) -> dict:
    meta = dict.fromkeys(REQUIRED_META, "x")
    meta.update(
        schema_version=1,
        model=model,
        config_hash="abc",
        nope=True,
        head_dim=16,
        scales=np.ones((layers, heads)).tolist(),
        data="austen:persuasion",
        seed=0,
        samples=1,
        length=T,
        train_len=L,
        backend="torch_chunked",
        entropy_reduction="heads",
        wall_time_s=1.5,
        git_hash="0123abcd",
    )
    return meta


# Strings that break a page escaped for the wrong context: `<!--<script>` swallows the next script
# element, `</script>` ends one, a tag or entity is read as HTML (by the page, or by plotly in titles,
# legends and hover), `%{y}` is a plotly template, U+2028 ends a line in older JS. No '/' in NAME: it is
# also a file and folder name.
NAME = "<!--<script>&amp;%{y}<b>x<img src=x onerror=window.pwned=1>"
HOSTILE = NAME + "</script><script>window.pwned=1</script>\u2028\u2029'\""
META_FIELDS = (
    "model",
    "data",
    "dtype",
    "device",
    "backend",
    "attention_path",
    "git_hash",
    "scale_source",
    "entropy_reduction",
    "entropy_lens_version",
    "created_utc",
)


def hostile(result: ScanResult, text: str = HOSTILE) -> ScanResult:
    """`result` with `text` in every string meta field the page shows."""
    result.meta.update(dict.fromkeys(META_FIELDS, text))
    return result


HISTORY_STATS = ("entropy", "max_logit", "max_prob")


def monitored_history(path, *, steps: int = 6, every: int = 1, stats=HISTORY_STATS, seed: int = 0):
    """Train a tiny Llama (tests/tiny.py: 2 layers, 4 heads) for `steps` AdamW steps under
    `AttentionMonitor(stats=stats, every=every)` and save its history to `path`; returns the monitor's
    `History` (what the file holds)."""
    import torch
    from tiny import make_tiny_model

    from entropy_lens import AttentionMonitor

    model = make_tiny_model(seed=seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    g = torch.Generator().manual_seed(seed)
    with AttentionMonitor(model, stats=stats, every=every) as mon:
        for step in range(1, steps + 1):
            mon.step = step
            ids = torch.randint(2, 300, (2, 24), generator=g)
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    mon.save(path)
    return mon.history


def page_data(page) -> dict:
    """The JSON the view's page carries (`page.html`'s `entropy-lens-data` script element), parsed."""
    text = re.search(
        r'<script type="application/json" id="entropy-lens-data">(.*?)</script>', page.html, re.DOTALL
    )
    return json.loads(text.group(1))


GENERATED_NEW = 8  # generated()'s max_new_tokens


def generated():
    """(GenerationResult, tokenizer): tiny-nope writes GENERATED_NEW tokens greedily after two left-padded
    prompts, recording entropy, max_prob, span_mass (prompt, generated, opening = (0, 3)), offset_prob
    (0, 1), top_key (k = 2) and distance_mass (bins 0, 2, 6), with its token texts. Sequence 0 ends early: the first token a first run
    wrote in sequence 0 alone is the end token of a second, identical but for that."""
    from entropy_lens import GenerationRecorder, load_model

    loaded = load_model("tiny-nope")
    model, tok = loaded.model, loaded.tokenizer
    tok.padding_side, tok.pad_token = "left", tok.eos_token
    batch = tok(
        ["It is a truth universally acknowledged", "Emma Woodhouse, handsome"],
        return_tensors="pt",
        padding=True,
    )
    kw = {"spans": {"opening": (0, 3)}, "offsets": (0, 1), "top_keys": 2, "distance_bins": (0, 2, 6)}
    stats = ("entropy", "max_prob", "span_mass", "offset_prob", "top_key", "distance_mass")

    def run(end):
        with GenerationRecorder(model, stats=stats, **kw) as rec:
            model.generate(
                **batch,
                max_new_tokens=GENERATED_NEW,
                do_sample=False,
                eos_token_id=end,
                pad_token_id=tok.eos_token_id,
            )
        return rec.result()

    first = run(None)
    end = next(int(t) for t in first.tokens[0] if t not in first.tokens[1])  # a token of sequence 0 alone
    result = run(end)
    assert result.lengths[0] < GENERATED_NEW == result.lengths[1], result.lengths  # sequence 0 ended
    return result.with_token_texts(tok), tok
