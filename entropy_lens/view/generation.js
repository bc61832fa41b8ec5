// entropy-lens view: a generation (the payload's `generations`: entropy_lens/view/generations.py), run before
// explorer.js, which calls window.entropyLensDrawGenerations(data) and waits for it before the page is ready.
// For the chosen generation, sequence, statistic, layer and head: a bar per generated token, then the prompt
// and the generated text token by token, each generated token coloured by the statistic; hovering a token
// (or its bar) shows its row-slice statistics (span masses, offset probabilities, mass by distance) and top keys with their probabilities and texts,
// and outlines those keys in the text. A token after its sequence ended has NaN (−1 for a key) in the
// payload: it is drawn as "ended", never as a number. Texts from files reach the DOM as textContent only,
// and plotly (which reads hover text as HTML) through plain().
window.entropyLensDrawGenerations = function (data) {
  "use strict";
  const gens = data.generations || [];
  if (!gens.length) return Promise.resolve();
  const CONFIG = { responsive: true, displaylogo: false };
  const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const plain = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/%/g, "&#37;");
  const has = (o, key) => o !== null && Object.prototype.hasOwnProperty.call(o, key);
  const state = { generation: 0, row: 0, stat: 0, layer: 0, head: 0, token: null };
  const el = (id) => document.getElementById(id);

  function bytes(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out.buffer;
  }
  // A generation's arrays, decoded on first use: values[name] (float32) and top_key (int32).
  function arrays(g) {
    if (!g.decoded) {
      g.decoded = { values: {}, top: g.top_key ? new Int32Array(bytes(g.top_key)) : null };
      for (const name of Object.keys(g.values)) g.decoded.values[name] = new Float32Array(bytes(g.values[name]));
    }
    return g.decoded;
  }
  // Every slot of array `name` at (sequence b, token n, layer, head): numbers, null after the end.
  function slots(g, name, b, n) {
    const a = arrays(g).values[name], cells = g.rows.length * g.steps * g.layers * g.heads;
    const k = a.length / cells, off = (((b * g.steps + n) * g.layers + state.layer) * g.heads + state.head) * k;
    return Array.from(a.subarray(off, off + k), (v) => (Number.isNaN(v) ? null : v));
  }
  const valueOf = (g, e, b, n) => slots(g, e.array, b, n)[e.slot];
  function topKeys(g, b, n) {
    const top = arrays(g).top;
    if (!top) return [];
    const k = g.top_keys, off = (((b * g.steps + n) * g.layers + state.layer) * g.heads + state.head) * k;
    const probs = has(g.values, "top_key_prob") ? slots(g, "top_key_prob", b, n) : [];
    return Array.from(top.subarray(off, off + k), (p, r) => ({ pos: p, prob: probs[r] === undefined ? null : probs[r] }));
  }
  const textOf = (g, id) => (id < 0 ? "" : has(g.texts, String(id)) ? g.texts[String(id)] : "#" + id);
  const quoted = (g, id) => (has(g.texts, String(id)) ? JSON.stringify(textOf(g, id)) : "#" + id);
  // The token at real position p of sequence b: where it lies (prompt or generated) and its id.
  function keyAt(g, b, p) {
    const row = g.rows[b];
    if (p < row.prompt_len) return { where: "prompt", id: row.prompt ? row.prompt[p] : null };
    const m = p - row.prompt_len;
    return { where: "generated token " + m, id: m < g.steps ? row.tokens[m] : -1 };
  }
  const shown = (v, e) => (v === null ? "ended" : v.toFixed(4) + " " + e.unit);

  function colour(t) {  // t in [0, 1] -> viridis, as an rgb() string
    const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1), i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    const c = VIRIDIS[i].map((a, j) => Math.round(a + (VIRIDIS[i + 1][j] - a) * (x - i)));
    return "rgb(" + c.join(",") + ")";
  }

  // The text's colour scale: the lowest value's colour to the highest's, each end labelled with its value.
  function drawScale(e, low, high) {
    const box = el("generation-scale");
    box.textContent = "";
    if (low === null || !e.unit) return;
    const label = (v) => v.toFixed(4) + " " + e.unit;
    const stops = VIRIDIS.map((c, i) => "rgb(" + c.join(",") + ") " + (100 * i / (VIRIDIS.length - 1)) + "%");
    const part = (text, cls) => {
      const s = document.createElement("span");
      s.textContent = text;
      s.className = cls;
      box.appendChild(s);
      return s;
    };
    part("text colour: " + label(low), "scale-end");
    part("", "scale-bar").style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
    part(label(high) + (high > low ? "" : " (one value: every token the middle colour)"), "scale-end");
    Object.assign(box.dataset, { low: low, high: high });
  }

  function drawText(g, e, values) {
    const box = el("generation-text"), row = g.rows[state.row];
    box.textContent = "";
    state.spans = {};  // real position -> its span
    const live = values.filter((v) => v !== null);
    const low = e.range ? e.range[0] : Math.min(...live), high = e.range ? e.range[1] : Math.max(...live);
    drawScale(e, live.length ? low : null, live.length ? high : null);
    // a line end shows as ↵ (a token of its own width, which a mouse can rest on), then breaks the line;
    // a token of no text as ∅
    const add = (text, cls, pos) => {
      const s = document.createElement("span");
      s.textContent = text === "" ? "∅" : text.replace(/\r?\n/g, "↵");
      s.className = cls;
      if (pos !== null) { s.dataset.pos = pos; state.spans[pos] = s; }
      box.appendChild(s);
      if (text.includes("\n")) box.appendChild(document.createTextNode("\n"));
      return s;
    };
    if (row.prompt) row.prompt.forEach((id, p) => add(textOf(g, id), "prompt", p));
    else add("(no prompt ids: a version 1 file) ", "prompt", null);
    for (let n = 0; n < row.length; n++) {
      const s = add(textOf(g, row.tokens[n]), "written", row.prompt_len + n), v = values[n];
      s.dataset.n = n;
      const t = high > low ? (v - low) / (high - low) : 0.5;
      s.style.background = colour(t);
      s.style.color = t < 0.55 ? "#fff" : "#000";
      s.addEventListener("mouseover", () => showToken(n));
    }
    if (row.length < g.steps) {
      const s = add("ended", "ended", null);
      s.title = "the sequence ended with token " + (row.length - 1) + ": no values after it";
      s.addEventListener("mouseover", () => showToken(row.length));
    }
  }

  // The hovered token's numbers for the chosen head, and its top keys outlined in the text.
  function showToken(n) {
    const g = gens[state.generation], b = state.row, row = g.rows[b], e = g.stats[state.stat];
    const box = el("generation-detail");
    Object.values(state.spans).forEach((s) => s.classList.remove("key", "hovered"));
    state.token = n;
    document.body.dataset.generationToken = n;
    if (n >= row.length) {
      box.textContent = "sequence " + b + " ended after " + row.length + " generated tokens (its end token " +
        "included): tokens " + row.length + ".." + (g.steps - 1) + " hold no values";
      return;
    }
    const P = row.prompt_len, lines = [];
    lines.push("token " + n + ": " + quoted(g, row.tokens[n]) + " (id " + row.tokens[n] + ", position " + (P + n) +
               "); its row is position " + (P + n - 1) + "'s query, layer " + state.layer + ", head " + state.head);
    if (e) lines.push(e.label + ": " + shown(valueOf(g, e, b, n), e));
    g.slices.forEach((s) => {  // each row-slice statistic's slots: spans, offsets, distance bins
      const v = slots(g, s.array, b, n);
      lines.push(s.label + ": " + s.parts.map((p, k) => p + " " + shown(v[k], { unit: "" }).trim()).join(", "));
    });
    const keys = topKeys(g, b, n);
    keys.forEach((k, r) => {
      if (k.pos < 0) return lines.push("top key " + (r + 1) + ": none (the row sees fewer keys)");
      const at = keyAt(g, b, k.pos);
      const what = at.id === null ? "(no prompt ids)" : quoted(g, at.id) + " (id " + at.id + ")";
      lines.push("top key " + (r + 1) + ": position " + k.pos + ", " + at.where + ", " + what +
                 (k.prob === null ? "" : ", p = " + k.prob.toFixed(4)));
      if (state.spans[k.pos]) state.spans[k.pos].classList.add("key");
    });
    if (state.spans[P + n]) state.spans[P + n].classList.add("hovered");
    box.textContent = lines.join("\n");
  }

  function draw() {
    const g = gens[state.generation], b = state.row, row = g.rows[b], e = g.stats[state.stat];
    const n = [...Array(g.steps).keys()];
    const values = e ? n.map((k) => (k < row.length ? valueOf(g, e, b, k) : null)) : n.map(() => null);
    el("generation-note").textContent = e ? e.label + " (" + e.unit + "): " + e.description : "no statistic recorded";
    drawText(g, e || { range: [0, 1] }, values);
    const custom = n.map((k) => [k < row.length ? plain(quoted(g, row.tokens[k])) : "ended"]);
    const unit = e ? plain(e.unit) : "";
    const trace = { type: "bar", x: n, y: values, customdata: custom, marker: { color: "#1f77b4" },
                    hovertemplate: "token %{x}: %{customdata[0]}<br>" + plain(e ? e.label : "") + " %{y:.4f} " + unit +
                    "<extra></extra>" };
    const shapes = [], annotations = [];
    if (row.length < g.steps) {  // after the end: no bar, a grey band saying so
      shapes.push({ type: "rect", x0: row.length - 0.5, x1: g.steps - 0.5, yref: "paper", y0: 0, y1: 1,
                    fillcolor: "#ddd", line: { width: 0 }, layer: "below" });
      annotations.push({ x: (row.length + g.steps - 1) / 2, y: 0.5, yref: "paper", text: "ended", showarrow: false });
    }
    const yaxis = { title: { text: plain(e ? e.label + " (" + e.unit + ")" : "") } };
    if (e && e.range) yaxis.range = [e.range[0], e.range[1] + 0.02];
    const layout = {
      title: { text: plain(g.label + ", sequence " + b + ": " + (e ? e.label : "") + ", layer " + state.layer +
                           ", head " + state.head + ", by generated token") },
      xaxis: { title: { text: "generated token n" }, range: [-0.5, g.steps - 0.5] }, yaxis: yaxis,
      shapes: shapes, annotations: annotations, hovermode: "closest", height: 360,
      margin: { t: 50, l: 60, r: 20, b: 50 },
    };
    Object.assign(document.body.dataset, { generationRow: b, generationStat: e ? e.name : "",
                                           generationLayer: state.layer, generationHead: state.head });
    return Plotly.react("generation-plot", [trace], layout, CONFIG).then(() => {
      if (state.token !== null) showToken(Math.min(state.token, g.steps - 1));
    });
  }

  function fill(select, options, chosen) {
    select.textContent = "";
    options.forEach(([value, text]) => {
      const o = document.createElement("option");
      o.value = value;
      o.textContent = text;
      select.appendChild(o);
    });
    select.value = chosen;
  }
  const pick = el("generation-select"), rowPick = el("generation-row"), statPick = el("generation-stat");
  const layerPick = el("generation-layer"), headPick = el("generation-head");
  function choose() {  // the menus of the chosen generation, keeping what it has of the earlier choices
    const g = gens[state.generation];
    state.row = Math.min(state.row, g.rows.length - 1);
    state.stat = Math.min(state.stat, Math.max(0, g.stats.length - 1));
    state.layer = Math.min(state.layer, g.layers - 1);
    state.head = Math.min(state.head, g.heads - 1);
    state.token = null;
    fill(rowPick, g.rows.map((r, b) => [b, "sequence " + b + " (" + r.length + " of " + g.steps + " tokens" +
                                        (r.length < g.steps ? ", ended" : "") + ")"]), state.row);
    fill(statPick, g.stats.map((e, k) => [k, e.label + " (" + e.unit + ")"]), state.stat);
    fill(layerPick, [...Array(g.layers).keys()].map((l) => [l, "layer " + l]), state.layer);
    fill(headPick, [...Array(g.heads).keys()].map((h) => [h, "head " + h]), state.head);
    rowPick.parentElement.hidden = g.rows.length < 2;
  }
  fill(pick, gens.map((g, k) => [k, g.label]), 0);
  pick.parentElement.hidden = gens.length < 2;
  choose();
  pick.addEventListener("change", () => { state.generation = Number(pick.value); choose(); draw(); });
  rowPick.addEventListener("change", () => { state.row = Number(rowPick.value); state.token = null; draw(); });
  statPick.addEventListener("change", () => { state.stat = Number(statPick.value); draw(); });
  layerPick.addEventListener("change", () => { state.layer = Number(layerPick.value); draw(); });
  headPick.addEventListener("change", () => { state.head = Number(headPick.value); draw(); });
  return draw().then(() => {
    el("generation-plot").on("plotly_hover", (ev) => showToken(Number(ev.points[0].x)));
    window.entropyLensGeneration = { state: state, draw: draw, showToken: showToken };
  });
};
