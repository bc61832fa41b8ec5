// entropy-lens view: draws the payload of entropy_lens/view/payload.py with plotly.js (inlined above).
// State: which result (or difference of two) the heat map shows, which row statistic (entropy, max_prob, ...:
// the payload's `stats`) and which of its per-head statistics (converged, growth, ...), which head is open.
// Strings from files reach plotly only through plain(): plotly reads titles, legend names and hover
// templates as HTML and %{...} templates. NaN/inf from a file arrive as null (NaN in the float32 means,
// the code `gap` in the uint16 envelope): plotly draws null as a break in the line and a blank cell.
// A generation's section is generation.js's; the page is ready when it has drawn too.
// Attention received by key position (a result's `keys`: its key statistics) is drawn below the
// head's curves on a log scale: keys at 0 arrive as null (left out, a gap) and the legend counts them.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("entropy-lens-data").textContent);
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  const CONFIG = { responsive: true, displaylogo: false };
  const state = { view: null, stat: "entropy", statistic: "converged", layer: 0, head: 0, dropped: null, key: null };

  // Text shown literally by plotly: its tags and entities escaped, and % (templates) as an entity.
  const plain = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/%/g, "&#37;");
  const fixed = (v, digits) => (v === null ? "undefined" : v.toFixed(digits));

  function bytes(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out.buffer;
  }
  // A statistic's curves, decoded on first use: mean (float32, in its unit) and the uint16 envelope.
  function decoded(s) {
    if (!s.decoded) {
      s.decoded = { mean: new Float32Array(bytes(s.curves.mean)) };
      if (s.curves.low) {
        s.decoded.low = new Uint16Array(bytes(s.curves.low));
        s.decoded.high = new Uint16Array(bytes(s.curves.high));
      }
    }
    return s.decoded;
  }
  const withHeads = data.results.map((r, i) => i).filter((i) => data.results[i].stats.entropy);
  const sameShape = (a, b) => a.layers === b.layers && a.heads === b.heads;

  // The heat map's choices: every result with heads, then A − B for each pair of the same shape.
  const views = withHeads.map((i) => ({ name: data.results[i].label, a: i, b: null }));
  for (const i of withHeads)
    for (const j of withHeads)
      if (i < j && sameShape(data.results[i], data.results[j]))
        views.push({ name: data.results[i].label + " − " + data.results[j].label, a: i, b: j });

  function fill(select, options, chosen) {
    select.innerHTML = "";
    options.forEach(([value, text]) => {
      const o = document.createElement("option");
      o.value = value;
      o.textContent = text;
      select.appendChild(o);
    });
    select.value = chosen;
  }

  const headCurve = (r, stat, layer, head) => curveOf(r, r.stats[stat], layer, head);
  // One head's curve of the statistic `s` of `r` (a row or a key statistic); a log-coded envelope
  // (`curves.log`: key statistics) holds steps of ln(value).
  function curveOf(r, s, layer, head) {
    const c = decoded(s), n = r.bins.starts.length, off = (layer * r.heads + head) * n;
    const mean = Array.from(c.mean.subarray(off, off + n), (v) => (Number.isNaN(v) ? null : v));
    if (!c.low) return { mean: mean, low: mean, high: mean };
    const code = (q) => s.curves.floor + q * s.curves.step;
    const up = (q) => (q === s.curves.gap ? null : s.curves.log ? Math.exp(code(q)) : code(q));
    return {
      mean: mean,
      low: Array.from(c.low.subarray(off, off + n), up),
      high: Array.from(c.high.subarray(off, off + n), up),
    };
  }
  const centers = (bins) => bins.starts.map((a, k) => (a + bins.stops[k] - 1) / 2);
  const ranges = (bins) => bins.starts.map((a, k) => [a, bins.stops[k] - 1]);

  // Mean line with its min–max envelope; hover shows the bin's positions (or, `along` a history, its
  // steps: {x, ranges, name}) and the exact numbers, in `fmt` (digits of the mean and the envelope, a note;
  // `split`: the envelope drawn as one shape per run of bins between gaps, never filled across one).
  const FIXED = { y: ".5f", env: ".4f", note: "" };
  function band(bins, c, label, color, yaxis, units, legend, role, along, fmt) {
    along = along || { x: centers(bins), ranges: ranges(bins), name: "position" };
    fmt = fmt || FIXED;
    const x = along.x, traces = [], name = plain(label);
    if (!bins.exact && fmt.split) {
      const px = [], py = [], held = (k) => c.low[k] !== null && c.high[k] !== null;
      let k = 0;
      while (k < x.length) {
        if (!held(k)) { k++; continue; }
        let e = k;
        while (e < x.length && held(e)) e++;
        // bins k .. e − 1: along the maxima, back along the minima; null ends the shape
        px.push(...x.slice(k, e), ...x.slice(k, e).reverse(), null);
        py.push(...c.high.slice(k, e), ...c.low.slice(k, e).reverse(), null);
        k = e;
      }
      traces.push({ x: px, y: py, yaxis: yaxis, mode: "lines", line: { width: 0 }, fill: "toself",
                    fillcolor: color + "33", hoverinfo: "skip", showlegend: false, legendgroup: name });
    } else if (!bins.exact) {
      traces.push({ x: x, y: c.low, yaxis: yaxis, mode: "lines", line: { width: 0 }, hoverinfo: "skip",
                    showlegend: false, legendgroup: name });
      traces.push({ x: x, y: c.high, yaxis: yaxis, mode: "lines", line: { width: 0 }, fill: "tonexty",
                    fillcolor: color + "33", hoverinfo: "skip", showlegend: false, legendgroup: name });
    }
    const custom = along.ranges.map((p, k) => [p[0], p[1], c.low[k], c.high[k]]);
    const hover = bins.exact
      ? name + "<br>" + along.name + " %{customdata[0]}: %{y:" + fmt.y + "} " + plain(units) + fmt.note + "<extra></extra>"
      : name + "<br>" + along.name + "s %{customdata[0]}–%{customdata[1]}: mean %{y:" + fmt.y + "} " + plain(units) +
        "<br>min %{customdata[2]:" + fmt.env + "}, max %{customdata[3]:" + fmt.env + "}" + fmt.note + "<extra></extra>";
    traces.push({ x: x, y: c.mean, yaxis: yaxis, mode: "lines", name: name, line: { color: color, width: 1.5 },
                  customdata: custom, hovertemplate: hover, showlegend: legend, legendgroup: name,
                  meta: { role: role } });
    return traces;
  }

  // The statistics a view offers: the row statistics its result holds (both, for a difference; own keys
  // only, as a file may name an array "constructor"), and the per-head statistics of the chosen one.
  const has = (o, key) => Object.prototype.hasOwnProperty.call(o, key);
  // A difference offers a statistic both hold with the same K (first_mass: the mass on the first K keys;
  // recent_mass: on the last W).
  const sameKeys = (view, s) => data.results[view.a].stats[s].keys === data.results[view.b].stats[s].keys;
  const statsOf = (view) => Object.keys(data.results[view.a].stats).filter(
    (s) => view.b === null || (has(data.results[view.b].stats, s) && sameKeys(view, s)));
  const perHead = (view, stat) => Object.keys(data.results[view.a].stats[stat].per_head);

  function statisticValues(view, stat, statistic) {
    const a = data.results[view.a].stats[stat].per_head[statistic];
    if (!a) return null;
    if (view.b === null) return a.values;
    const b = data.results[view.b].stats[stat].per_head[statistic];
    if (!b) return null;
    return a.values.map((row, l) =>
      row.map((v, h) => (v === null || b.values[l][h] === null ? null : v - b.values[l][h])));
  }

  function drawHeatmap() {
    const view = views[state.view], r = data.results[view.a], s = r.stats[state.stat];
    const stat = s.per_head[state.statistic], z = statisticValues(view, state.stat, state.statistic);
    const note = document.getElementById("statistic-note");
    const units = stat ? stat.units : "";
    note.textContent = (stat ? stat.description + (view.b === null ? "" : "; difference " + view.name) :
      (s.undefined[state.statistic] || "not available for this result")) +
      (state.dropped ? " (" + state.dropped + ")" : "");
    const hover = "layer %{y}, head %{x}<br>%{z:.4f} " + plain(units) + "<extra></extra>";
    const trace = { type: "heatmap", z: z || [[]], x: [...Array(r.heads).keys()], y: [...Array(r.layers).keys()],
                    xgap: 1, ygap: 1, hovertemplate: hover, colorbar: { title: { text: plain(units) } },
                    colorscale: view.b === null ? "Viridis" : "RdBu", reversescale: view.b !== null };
    if (view.b !== null) trace.zmid = 0;
    const layout = {
      title: { text: plain((view.b === null ? view.name : "difference " + view.name) + ": " +
                           (state.stat === "entropy" ? "" : state.stat + ", ") + state.statistic) },
      xaxis: { title: { text: r.reduction === "mean" ? "mean of heads" : "head" }, dtick: r.heads > 16 ? 2 : 1,
               zeroline: false, showgrid: false },
      yaxis: { title: { text: "layer" }, autorange: "reversed", dtick: r.layers > 16 ? 2 : 1,
               zeroline: false, showgrid: false },
      plot_bgcolor: "#e8e8e8",  // a blank (null) cell: a statistic undefined for that head
      margin: { t: 50, l: 60, r: 20, b: 50 }, height: Math.max(320, 22 * r.layers + 140),
      shapes: [{ type: "rect", x0: state.head - 0.5, x1: state.head + 0.5, y0: state.layer - 0.5,
                 y1: state.layer + 0.5, line: { color: "#ff0000", width: 2 } }],
    };
    return Plotly.react("heatmap", [trace], layout, CONFIG);
  }

  function showHead(layer, head) {
    state.layer = layer;
    state.head = head;
    const main = data.results[views[state.view].a], stat = state.stat, s = main.stats[stat];
    const shown = withHeads.filter((i) => sameShape(data.results[i], main));
    const traces = [], lacking = [];
    let longest = null, L = null;
    // first_mass of different K (recent_mass of different W) side by side: each curve says its K (W)
    const keys = new Set(shown.filter((i) => has(data.results[i].stats, stat)).map((i) => data.results[i].stats[stat].keys));
    const named = (r) => r.label + (keys.size > 1 ? " (" + r.stats[stat].letter + " = " + r.stats[stat].keys + ")" : "");
    shown.forEach((i, k) => {
      const r = data.results[i], color = COLORS[k % COLORS.length];
      L = L || r.train_len;
      if (has(r.stats, stat)) {
        if (!longest || r.length > longest.length) longest = r;
        traces.push(...band(r.bins, headCurve(r, stat, layer, head), named(r), color, "y", s.unit, true, stat));
      } else {
        lacking.push(r.label);
      }
      const loss = { mean: r.loss.mean, low: r.loss.low, high: r.loss.high };
      traces.push(...band(r.bins, loss, r.label + " loss", color, "y2", "nats", false, "loss"));
    });
    const bound = longest.stats[stat].bound;  // the longest result's: it covers every other's positions
    if (bound)
      traces.push({ x: bound.x, y: bound.y, mode: "lines", name: bound.label,
                    line: { color: "#777", dash: "dash", width: 1 }, hovertemplate: bound.hover + "<extra></extra>" });
    const shapes = L ? [{ type: "line", x0: L, x1: L, yref: "paper", y0: 0, y1: 1, line: { color: "#444", dash: "dot" } }] : [];
    const annotations = L ? [{ x: L, y: 1, yref: "paper", text: " L = " + L, showarrow: false, yanchor: "top",
                               xanchor: "left" }] : [];
    const yaxis = { title: { text: plain(stat + " (" + s.unit + ")") }, domain: [0.36, 1] };
    if (s.range) yaxis.range = [s.range[0] - 0.02, s.range[1] + 0.02];  // a probability: [0, 1] whatever it holds
    const missing = lacking.length ? "<br><sub>not recorded in " + plain(lacking.join(", ")) + "</sub>" : "";
    const layout = {
      title: { text: "layer " + layer + ", head " + head + ": " + plain(stat) + " by position" + missing },
      xaxis: { title: { text: "position i" }, anchor: "y2" },
      yaxis: yaxis,
      yaxis2: { title: { text: "loss (nats)" }, domain: [0, 0.26], anchor: "x" },
      shapes: shapes, annotations: annotations, hovermode: "closest", height: 560,
      margin: { t: 80, l: 60, r: 20, b: 50 }, legend: { orientation: "h", y: 1.02, yanchor: "bottom" },
    };
    document.body.dataset.layer = layer;
    document.body.dataset.head = head;
    document.body.dataset.stat = stat;
    return Promise.all([Plotly.react("head", traces, layout, CONFIG), drawHeatmap(), drawReceived(layer, head)]);
  }

  // Attention received by key position for the head shown above (key statistics: a result's `keys`), on a
  // log scale, for each result of the head plot's shape holding the chosen one, L marked as above. Keys
  // at 0 (no counted query row can attend them) are left out: gaps, and out of a bin's mean, min and max;
  // the legend and the hover say how many. A binned curve gets key 0's own value as a diamond.
  const withKeys = withHeads.filter((i) => data.results[i].keys);
  const keyNames = [...new Set(withKeys.flatMap((i) => Object.keys(data.results[i].keys.stats)))];
  const keyOf = (r, key) => (r.keys && has(r.keys.stats, key) ? r.keys.stats[key] : null);
  function drawReceived(layer, head) {
    if (!withKeys.length) return Promise.resolve();
    const main = data.results[views[state.view].a], key = state.key;
    const shown = withHeads.filter((i) => sameShape(data.results[i], main));
    const rows = new Set(shown.filter((i) => keyOf(data.results[i], key)).map((i) => data.results[i].keys.rows));
    const traces = [], lacking = [];
    let L = null, unit = "";
    shown.forEach((i, k) => {
      const r = data.results[i], color = COLORS[k % COLORS.length], s = keyOf(r, key);
      L = L || r.train_len;
      if (!s) return lacking.push(r.label);
      unit = s.unit;
      const zeros = s.zeros[layer][head];
      const label = r.label + (rows.size > 1 ? " (" + r.keys.rows + ")" : "") +
        (zeros ? ", " + zeros + " keys at 0 omitted" : "");
      const note = zeros ? "<br>" + zeros + " keys receive 0: omitted (gaps, not in a bin's mean, min, max)" : "";
      const along = { x: centers(r.bins), ranges: ranges(r.bins), name: "key" };
      traces.push(...band(r.bins, curveOf(r, s, layer, head), label, color, "y", s.unit, true, key, along,
                          { y: ".4g", env: ".4g", note: note, split: true }));
      const first = s.first[layer][head];
      if (!r.bins.exact && first !== null)
        traces.push({ x: [0], y: [first], yaxis: "y", mode: "markers", showlegend: false, legendgroup: plain(label),
                      marker: { color: color, symbol: "diamond", size: 8 }, meta: { role: "first" },
                      hovertemplate: plain(r.label) + "<br>key 0: %{y:.4g} " + plain(s.unit) + "<extra></extra>" });
    });
    const shapes = L ? [{ type: "line", x0: L, x1: L, yref: "paper", y0: 0, y1: 1, line: { color: "#444", dash: "dot" } }] : [];
    const annotations = L ? [{ x: L, y: 1, yref: "paper", text: " L = " + L, showarrow: false, yanchor: "top",
                               xanchor: "left" }] : [];
    const over = rows.size === 1 ? ", over " + [...rows][0] : "";
    const missing = lacking.length ? "<br><sub>not recorded in " + plain(lacking.join(", ")) + "</sub>" : "";
    const layout = {
      title: { text: "layer " + layer + ", head " + head + ": " + plain(key + " by key position" + over) + missing },
      xaxis: { title: { text: "key position j" } },
      yaxis: { title: { text: plain(key + " (" + unit + "), log scale") }, type: "log", exponentformat: "power" },
      shapes: shapes, annotations: annotations, hovermode: "closest", height: 460,
      margin: { t: 80, l: 60, r: 20, b: 50 }, legend: { orientation: "h", y: 1.02, yanchor: "bottom" },
    };
    document.body.dataset.key = key;
    return Plotly.react("received", traces, layout, CONFIG);
  }

  function drawSweep(s, k) {
    const x = centers(s.bins);
    const custom = s.scales.map(() => ranges(s.bins));
    const heat = { type: "heatmap", x: x, y: s.scales.map(String), z: s.loss, customdata: custom,
                   colorscale: "Viridis", colorbar: { title: { text: "nats" } },
                   hovertemplate: "scale %{y}<br>positions %{customdata[0]}–%{customdata[1]}<br>loss %{z:.5f} nats<extra></extra>" };
    const L = s.train_len;
    const vline = L ? [{ type: "line", x0: L, x1: L, yref: "paper", y0: 0, y1: 1, line: { color: "#fff", dash: "dot" } }] : [];
    Plotly.newPlot("sweep-" + k + "-loss", [heat], {
      title: { text: plain(s.label + ": loss by position × scale") }, xaxis: { title: { text: "position i" } },
      yaxis: { title: { text: "scale s (λ = s/√d)" }, type: "category" }, shapes: vline, height: 380,
      margin: { t: 50, l: 70, r: 20, b: 50 },
    }, CONFIG);
    const traces = band(s.bins, s.best, "best scale per position", COLORS[0], "y", "", true);
    let title = s.label + ": best scale by position";
    if (s.fit) {
      const f = s.fit;
      traces.push({ x: f.x, y: f.y, mode: "lines", name: "fit 1 + a ln(i/L): a = " + fixed(f.a, 4) + " ± " +
                    fixed(f.a_stderr, 4) + ", R² = " + fixed(f.r2, 3), line: { color: COLORS[1], width: 2 },
                    hovertemplate: "fit at %{x}: %{y:.4f}<extra></extra>" });
    } else {
      title += " (fit undefined: " + s.fit_undefined + ")";
    }
    const shapes = vline.map((v) => Object.assign({}, v, { line: { color: "#444", dash: "dot" } }));
    if (s.s_star)
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: s.s_star.scale, y1: s.s_star.scale,
                    line: { color: COLORS[2], dash: "dash" } });
    Plotly.newPlot("sweep-" + k + "-best", traces, {
      title: { text: plain(title + (s.s_star ? "; s* = " + s.s_star.scale : "")) },
      xaxis: { title: { text: "position i" } }, yaxis: { title: { text: "scale s" } }, shapes: shapes,
      height: 380, margin: { t: 50, l: 70, r: 20, b: 50 }, legend: { orientation: "h", y: -0.25 },
    }, CONFIG);
  }

  // Monitor histories: a statistic by step × head for one layer, and every head's curve over the steps
  // (the chosen head drawn over the others, with its envelope). A history's stats[stat].curves are laid
  // out as a scan's, (layers, heads, bins), so headCurve reads them.
  const hstate = { history: 0, stat: null, layer: 0, head: 0 };
  function drawHistory() {
    const h = data.histories[hstate.history], s = h.stats[hstate.stat], unit = plain(s.unit);
    const along = { x: h.steps.x, ranges: h.steps.first.map((a, k) => [a, h.steps.last[k]]), name: plain(h.step_unit) };
    const curves = [...Array(h.heads).keys()].map((head) => headCurve(h, hstate.stat, hstate.layer, head));
    document.getElementById("history-note").textContent = s.description;
    const custom = curves.map(() => along.ranges);
    const hover = along.name + (h.bins.exact ? " %{customdata[0]}" : "s %{customdata[0]}–%{customdata[1]}") +
      ", head %{y}<br>%{z:.4f} " + unit + (h.bins.exact ? "" : " (mean)") + "<extra></extra>";
    const heat = { type: "heatmap", x: along.x, y: [...Array(h.heads).keys()], z: curves.map((c) => c.mean),
                   customdata: custom, hovertemplate: hover, colorscale: "Viridis", colorbar: { title: { text: unit } } };
    const title = plain(h.label + ": " + hstate.stat + " (" + s.reduction + " over a step's rows), layer " + hstate.layer);
    const heatLayout = {
      title: { text: title }, xaxis: { title: { text: plain(h.step_unit) } },
      yaxis: { title: { text: "head" }, autorange: "reversed", dtick: h.heads > 16 ? 2 : 1, zeroline: false },
      height: Math.max(320, 22 * h.heads + 140), margin: { t: 50, l: 60, r: 20, b: 50 },
      shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: hstate.head, y1: hstate.head,
                 line: { color: "#ff0000", width: 1, dash: "dot" } }],
    };
    const traces = [];
    curves.forEach((c, head) => {
      if (head === hstate.head) return;
      traces.push({ x: along.x, y: c.mean, mode: "lines", name: "head " + head, line: { color: "#9aa5b1", width: 1 },
                    opacity: 0.6, hovertemplate: "head " + head + ", " + plain(h.step_unit) + " %{x}: %{y:.4f} " + unit +
                    "<extra></extra>", meta: { head: head } });
    });
    const chosen = band(h.bins, curves[hstate.head], "head " + hstate.head, COLORS[1], "y", s.unit, true, hstate.stat, along);
    chosen[chosen.length - 1].line.width = 3;
    chosen[chosen.length - 1].meta.head = hstate.head;
    traces.push(...chosen);
    const layout = {
      title: { text: plain(h.label + ": " + hstate.stat + " by " + h.step_unit + ", layer " + hstate.layer +
                           ", head " + hstate.head + " highlighted") },
      xaxis: { title: { text: plain(h.step_unit) } }, yaxis: { title: { text: plain(hstate.stat + " (" + s.unit + ")") } },
      hovermode: "closest", height: 480, margin: { t: 60, l: 60, r: 20, b: 50 }, showlegend: false,
    };
    Object.assign(document.body.dataset, { historyStat: hstate.stat, historyLayer: hstate.layer, historyHead: hstate.head });
    return Promise.all([Plotly.react("history-heatmap", [heat], heatLayout, CONFIG),
                        Plotly.react("history-curves", traces, layout, CONFIG)]);
  }
  function setupHistories() {
    if (!data.histories.length) return Promise.resolve();
    const pick = document.getElementById("history-select"), statPick = document.getElementById("history-stat");
    const layerPick = document.getElementById("history-layer");
    const choose = () => {  // keep the statistic and layer where the history has them
      const h = data.histories[hstate.history], stats = Object.keys(h.stats);
      if (!stats.includes(hstate.stat)) hstate.stat = stats[0];
      hstate.layer = Math.min(hstate.layer, h.layers - 1);
      hstate.head = Math.min(hstate.head, h.heads - 1);
      fill(statPick, stats.map((s) => [s, s + " (" + h.stats[s].unit + ")"]), hstate.stat);
      fill(layerPick, [...Array(h.layers).keys()].map((l) => [l, "layer " + l]), hstate.layer);
    };
    fill(pick, data.histories.map((h, i) => [i, h.label]), 0);
    pick.parentElement.hidden = data.histories.length < 2;
    choose();
    pick.addEventListener("change", () => { hstate.history = Number(pick.value); choose(); drawHistory(); });
    statPick.addEventListener("change", () => { hstate.stat = statPick.value; drawHistory(); });
    layerPick.addEventListener("change", () => { hstate.layer = Number(layerPick.value); drawHistory(); });
    return drawHistory().then(() => {
      document.getElementById("history-heatmap").on("plotly_click", (ev) => {
        hstate.head = Number(ev.points[0].y);
        drawHistory();
      });
    });
  }

  data.sweeps.forEach(drawSweep);
  const historiesDrawn = setupHistories();
  // a generation's section: generation.js, inlined before this script on a page holding one
  const generationsDrawn = window.entropyLensDrawGenerations ? window.entropyLensDrawGenerations(data) : Promise.resolve();
  const viewSelect = document.getElementById("view-select"), statSelect = document.getElementById("statistic-select");
  const rowSelect = document.getElementById("stat-select");
  if (views.length) {
    state.view = 0;
    fill(viewSelect, views.map((v, i) => [i, v.name]), 0);
    // Keep the chosen statistics where the view offers them, else fall back (and say what was dropped).
    const choose = () => {
      const view = views[state.view], stats = statsOf(view);
      let unkeyed = null;
      if (!stats.includes(state.stat)) {
        const own = (i) => (i !== null && has(data.results[i].stats, state.stat) ? data.results[i].stats[state.stat] : null);
        const a = own(view.a), b = own(view.b);
        if (a && b && a.keys !== b.keys)
          unkeyed = state.stat + " is not differenced: " + a.letter + " = " + a.keys + " in " + data.results[view.a].label +
            ", " + b.letter + " = " + b.keys + " in " + data.results[view.b].label;
        state.stat = "entropy";
      }
      const names = perHead(view, state.stat), why = data.results[view.a].stats[state.stat].undefined;
      state.dropped = unkeyed;
      if (!names.includes(state.statistic)) {
        if (why[state.statistic]) state.dropped = state.statistic + " is undefined for " + state.stat + ": " + why[state.statistic];
        state.statistic = "converged";
      }
      fill(rowSelect, stats.map((s) => [s, s + " (" + data.results[view.a].stats[s].unit + ")"]), state.stat);
      fill(statSelect, names.map((s) => [s, s]), state.statistic);
    };
    choose();
    // a page whose results hold entropy alone shows no row-statistic menu, as before --stats existed
    rowSelect.parentElement.hidden = !withHeads.some((i) => Object.keys(data.results[i].stats).length > 1);
    const redraw = () => showHead(Math.min(state.layer, data.results[views[state.view].a].layers - 1),
                                  Math.min(state.head, data.results[views[state.view].a].heads - 1));
    viewSelect.addEventListener("change", () => { state.view = Number(viewSelect.value); choose(); redraw(); });
    rowSelect.addEventListener("change", () => { state.stat = rowSelect.value; choose(); redraw(); });
    statSelect.addEventListener("change", () => { state.statistic = statSelect.value; state.dropped = null; drawHeatmap(); });
    if (withKeys.length) {  // the key statistics' menu: each with the unit of the first result holding it
      const keySelect = document.getElementById("key-select");
      state.key = keyNames[0];
      const unitOf = (key) => keyOf(data.results[withKeys.find((i) => keyOf(data.results[i], key))], key).unit;
      fill(keySelect, keyNames.map((k) => [k, k + " (" + unitOf(k) + ")"]), state.key);
      keySelect.addEventListener("change", () => { state.key = keySelect.value; drawReceived(state.layer, state.head); });
    }
    Promise.all([showHead(0, 0), historiesDrawn, generationsDrawn]).then(() => {
      document.getElementById("heatmap").on("plotly_click", (ev) => {
        const p = ev.points[0];
        showHead(Number(p.y), Number(p.x));
      });
      document.body.dataset.readyMs = performance.now().toFixed(0);  // time to interactive, for benchmarks
      document.body.dataset.ready = "1";
    });
  } else {
    document.getElementById("heads-section").hidden = true;
    Promise.all([historiesDrawn, generationsDrawn]).then(() => {
      document.body.dataset.readyMs = performance.now().toFixed(0);
      document.body.dataset.ready = "1";
    });
  }
  window.entropyLens = { data: data, state: state, showHead: showHead, history: hstate, drawHistory: drawHistory,
                         drawReceived: drawReceived };
})();
