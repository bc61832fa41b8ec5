"""The page: one HTML file with plotly.js, the data and a small script inlined; no network, no server.

    page = view(["nope.npz", "rope.npz"])        # or view([("NoPE", nope), ("RoPE", rope)]) from Python
    page.save("report.html")                     # atomically; open it in any browser, offline
    page                                         # in Jupyter: the same page inline (an iframe)

In Jupyter the page is an `<iframe srcdoc=...>` holding the whole document, so it is saved with the
notebook and drawn again when the notebook is reopened (by a Jupyter that trusts it: one that ran it,
or after File > Trust Notebook), and its script cannot clash with the notebook's own (plotly.js and
require.js in classic Notebook).

Every string from a file (labels, file and folder names, meta) lands escaped for its context: in HTML
text and attributes by `html.escape`; in the data's `<script>` element by `script_json`, which writes `<`,
`>`, `&`, U+2028 and U+2029 as JSON escapes, so no `<!--`, `<script` or `</script` can end or swallow the
element; explorer.js escapes them again where plotly reads text as HTML (titles, legend, hover).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from entropy_lens.results import atomic_write_text
from entropy_lens.settings import check_fields
from entropy_lens.statistics import ENTROPY
from entropy_lens.view.config import ViewConfig
from entropy_lens.view.payload import build_payload
from entropy_lens.view.sources import gather

__all__ = ["View", "view"]

STYLE = """
body { font-family: system-ui, sans-serif; margin: 16px 24px; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table.meta { border-collapse: collapse; font-size: 0.85em; }
table.meta td, table.meta th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }
details { max-width: 100%; overflow-x: auto; }
.controls { margin: 8px 0; } .controls label { margin-right: 16px; }
.note { font-size: 0.85em; color: #555; }
.tokens { font-family: ui-monospace, monospace; font-size: 0.9em; line-height: 1.9; white-space: pre-wrap;
  border: 1px solid #ddd; padding: 6px 8px; max-height: 420px; overflow-y: auto; }
.tokens span { border-radius: 3px; padding: 1px 0; }
.tokens .prompt { color: #777; } .tokens .written { cursor: pointer; }
.tokens .ended { color: #999; background: #eee; font-style: italic; padding: 1px 4px; }
.tokens .key { outline: 2px solid #d62728; } .tokens .hovered { outline: 2px solid #222; }
.scale { font-size: 0.85em; margin: 6px 0; display: flex; align-items: center; gap: 8px; }
.scale .scale-bar { display: inline-block; width: 160px; height: 12px; border-radius: 2px; }
.detail { font-size: 0.85em; min-height: 5em; margin-top: 8px; white-space: pre-wrap; }
"""


@dataclass
class View:
    """A built page: `html` is the whole document (left out of the repr: megabytes of it)."""

    html: str = field(repr=False)
    title: str
    height: int  # pixels the page needs, for the notebook's iframe

    def save(self, path: str | Path) -> Path:
        """Write the page to `path` atomically (a reader sees the old file or the new one)."""
        return atomic_write_text(path, self.html)

    def _repr_html_(self) -> str:
        return (
            f'<iframe title="{html.escape(self.title)}" srcdoc="{html.escape(self.html, quote=True)}" '
            f'style="width: 100%; height: {self.height}px; border: 1px solid #ddd;"></iframe>'
        )


def view(results, *, labels=None, points: int | None = None, train_len: int | None = None) -> View:
    # the keywords are view.config.ViewConfig's fields: `entropy-lens view` passes them as they are
    """An interactive page of `results`: results `.npz` paths, sweep folders, monitor histories (their
    `.npz`, a folder holding attention-history.npz, or a `History`: `mon.history`), `ScanResult`s,
    `Sweep`s, or (label, any of these) pairs.

    Parameters
    ----------
    labels : one name per item (default: file names, or "result 1", ...).
    points : bins per curve (default: 512, fewer when many heads of several results would make the
        page large: `reduce.points_for`); curves no longer than this are shown position by position (a
        history's, step by step).
    train_len : L for the statistics and the fit (default: each result's meta).
    """
    check_fields(ViewConfig, {"points": points, "train_len": train_len})  # as the flags are checked
    sources = gather(results, labels)
    found, sweeps, histories = sources.results, sources.sweeps, sources.histories
    payload = build_payload(
        found,
        sweeps,
        points=points,
        train_len=train_len,
        histories=histories,
        generations=sources.generations,
    )
    parts = [", ".join(r["label"] for r in payload["results"])]
    parts += [", ".join(f"sweep {s['label']}" for s in payload["sweeps"])]
    parts += [", ".join(f"history {h['label']}" for h in payload["histories"])]
    parts += [", ".join(f"generation {g['label']}" for g in payload["generations"])]
    title = "entropy-lens view: " + "; ".join(p for p in parts if p)
    layers = max([r.result.n_layers for r in found if r.result.n_heads] + [0])
    heads = (120 + 22 * layers + 140 + 560) if layers else 0  # menus, heat map (explorer.js), head plot
    heads += 560 * any("keys" in r for r in payload["results"])  # attention received (explorer.js)
    most = max([h["heads"] for h in payload["histories"]] + [0])  # the history's heat map: a row per head
    watched = (120 + max(320, 22 * most + 140) + 500) if histories else 0
    written = 1100 if sources.generations else 0  # menus, the token plot, the text, the hovered token
    return View(
        html=render(payload, title),
        title=title,
        height=520 + heads + 800 * len(sweeps) + watched + written,
    )


def render(payload: dict, title: str) -> str:
    """The HTML document of `payload` (payload.build_payload)."""
    from plotly.offline import get_plotlyjs

    script = files("entropy_lens.view").joinpath("explorer.js").read_text(encoding="utf-8")
    if payload.get("generations"):  # its own script, run first: explorer.js waits for it to draw
        script = files("entropy_lens.view").joinpath("generation.js").read_text(encoding="utf-8") + script
    data = script_json(payload)
    sweeps = "".join(
        f'<h2>Sweep: {html.escape(s["label"])}</h2><div id="sweep-{k}-loss"></div><div id="sweep-{k}-best"></div>'
        for k, s in enumerate(payload["sweeps"])
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
{meta_table(payload)}
<section id="heads-section">
<h2>Heads</h2>
<div class="controls"><label>heat map of <select id="view-select"></select></label>
<label>row statistic <select id="stat-select"></select></label>
<label>statistic <select id="statistic-select"></select></label></div>
<div class="note" id="statistic-note"></div>
<div id="heatmap"></div>
<div class="note">Click a cell: that head's entropy by position (bits) for every result of the same shape, the
bound log₂(i + 1) and L; the loss (nats) below.{stats_note(payload)} Curves longer than {payload["points"]}
positions are shown as the mean of each bin with its min–max envelope.</div>
<div id="head"></div>{received_section(payload)}
</section>
{sweeps}
{history_section(payload)}
{generation_section(payload)}
<script type="application/json" id="entropy-lens-data">{data}</script>
<script>{script}</script>
</body></html>
"""


def history_section(payload: dict) -> str:
    """The monitor histories' section (explorer.js draws it): menus, the step × head heat map of one
    layer, every head's curve over the steps; "" for a page without histories."""
    if not payload["histories"]:
        return ""
    return f"""<section id="history-section">
<h2>Training history</h2>
<details open><summary>Histories: model, statistics, steps</summary>{columns(payload["histories"], "history-meta")}</details>
<div class="controls"><label>history <select id="history-select"></select></label>
<label>statistic <select id="history-stat"></select></label>
<label>layer <select id="history-layer"></select></label></div>
<div class="note" id="history-note"></div>
<div id="history-heatmap"></div>
<div class="note">A statistic of each recorded training step (AttentionMonitor, train-tiny --monitor) by step
and head, for the layer chosen; click a cell: that head's curve stands out among every head's of the layer.
Histories of more than {payload["points"]} records are shown as the mean of each bin of steps with its min–max
envelope.</div>
<div id="history-curves"></div>
</section>"""


def generation_section(payload: dict) -> str:
    """The generations' section (generation.js draws it): menus of generation, sequence, statistic,
    layer and head, the statistic of every generated token, the text token by token (coloured by it) and
    the hovered token's span masses and top keys; "" for a page without generations."""
    if not payload.get("generations"):
        return ""
    notes = "".join(
        f'<p class="note">{html.escape(g["label"])}: {html.escape(n)}</p>'
        for g in payload["generations"]
        for n in g["notes"]
    )
    return f"""<section id="generation-section">
<h2>Generation</h2>
<details open><summary>Generations: model, statistics, spans</summary>{columns(payload["generations"], "generation-meta")}{notes}</details>
<div class="controls"><label>generation <select id="generation-select"></select></label>
<label>sequence <select id="generation-row"></select></label>
<label>statistic <select id="generation-stat"></select></label>
<label>layer <select id="generation-layer"></select></label>
<label>head <select id="generation-head"></select></label></div>
<div class="note" id="generation-note"></div>
<div id="generation-plot"></div>
<div class="note">The chosen head's statistic of each generated token's row (the query whose logits chose it).
Below, the prompt and the generated text, each generated token coloured by the statistic (viridis, from the
sequence's lowest value to its highest; a probability from 0 to 1: the scale above the text); hover a generated
token (or its bar) for its span masses and its top keys with their probabilities and texts (the keys are
outlined in the text). A token after its sequence ended has no value: it is shown as ended.</div>
<div id="generation-scale" class="scale"></div>
<div id="generation-text" class="tokens"></div>
<div id="generation-detail" class="detail"></div>
</section>"""


def received_section(payload: dict) -> str:
    """The menu, note and plot of attention received by key position (explorer.js draws it) for a page
    with key statistics (`scan --stats received,...`); "" for one without: the page as before them."""
    stats = {name: s for r in payload["results"] for name, s in r.get("keys", {}).get("stats", {}).items()}
    if not stats:
        return ""
    each = "; ".join(f"{name} ({s['unit']}: {s['description']}; {s['samples']})" for name, s in stats.items())
    return f"""
<div class="controls"><label>key statistic <select id="key-select"></select></label></div>
<div class="note">The clicked head's attention received by key position j, for every result of the same shape
that recorded it, on a log scale (the first key, an attention sink, can receive orders of magnitude more
than the rest), with L marked: {html.escape(each)}. Keys that receive 0 (no counted query row can attend
them) are omitted: gaps in the line and its envelope, left out of a bin's mean, min and max, and counted in
the legend. Binned as the curves above; a binned curve shows key 0's own value as a diamond.</div>
<div id="received"></div>"""


def stats_note(payload: dict) -> str:
    """What the head plot draws of each row statistic beyond entropy (scan --stats), escaped; "" for none."""
    stats = {name: s for r in payload["results"] for name, s in r["stats"].items() if name != ENTROPY.name}
    if not stats:
        return ""
    how = lambda s: (
        (f", under its bound {s['bound']['label']}" if s["bound"] else "")
        + (f", on [{s['range'][0]}, {s['range'][1]}]" if s["range"] else "")
    )
    each = "; ".join(f"{name} ({s['unit']}{how(s)})" for name, s in stats.items())
    return html.escape(f" The row statistics of scan --stats, chosen above, in their own units: {each}.")


_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(payload: dict) -> str:
    """`payload` as JSON safe inside a `<script>` element: no `<`, `>` or `&` (written as \\u003c, \\u003e,
    \\u0026, which JSON.parse reads back as themselves) and no U+2028/U+2029 (line ends to older JS)."""
    data = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    for char, escape in _SCRIPT_ESCAPES.items():
        data = data.replace(char, escape)
    return data


def meta_table(payload: dict) -> str:
    """One column per result: its label, file, and the meta fields payload.meta_rows chose."""
    results = payload["results"]
    sweeps = payload["sweeps"]
    if not results and not sweeps:
        return ""
    text = columns(results, "meta") if results else ""
    text = f"<details open><summary>Results: model, length, scales, backend, provenance</summary>{text}"
    for r in results:  # what the page could not show as the file has it: gaps, an unusable L
        text += "".join(
            f'<p class="note">{html.escape(r["label"])}: {html.escape(n)}</p>' for n in r["notes"]
        )
    for s in sweeps:
        scales = html.escape(", ".join(f"{x:g}" for x in s["scales"]))
        text += (
            f'<p class="note">sweep {html.escape(s["label"])} ({html.escape(s["source"])}): model '
            f"{html.escape(str(s['model']))}, length {html.escape(str(s['length']))}, "
            f"L = {html.escape(str(s['train_len']))}, scales {scales}</p>"
        )
    return text + "</details>"


def columns(items: list[dict], table_id: str) -> str:
    """A table of one column per item (a result's or a history's payload): its label, file and meta rows."""
    keys = list(dict.fromkeys(k for r in items for k in r["meta"]))
    cells = lambda values: "".join(f"<td>{html.escape(str(v))}</td>" for v in values)
    head = "<tr><th></th>" + "".join(f"<th>{html.escape(r['label'])}</th>" for r in items) + "</tr>"
    rows = [f"<tr><th>file</th>{cells(r['source'] for r in items)}</tr>"]
    rows += [f"<tr><th>{html.escape(k)}</th>{cells(r['meta'].get(k, '') for r in items)}</tr>" for k in keys]
    return f'<table class="meta" id="{table_id}">{head}{"".join(rows)}</table>'
