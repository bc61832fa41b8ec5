// entropy-lens view: draws the payload of entropy_lens/view/payload.py with plotly.js (inlined above).
// State: which result (or difference of two) the heat map shows, which statistic, which head is open.
// Strings from files reach plotly only through plain(): plotly reads titles, legend names and hover
// templates as HTML and %{...} templates. NaN/inf from a file arrive as null (NaN in the float32 means,
// the code `gap` in the uint16 envelope): plotly draws null as a break in the line and a blank cell.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("entropy-lens-data").textContent);
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  const CONFIG = { responsive: true, displaylogo: false };
  const state = { view: null, statistic: "converged", layer: 0, head: 0 };

  // Text shown literally by plotly: its tags and entities escaped, and % (templates) as an entity.
  const plain = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/%/g, "&#37;");
  const fixed = (v, digits) => (v === null ? "undefined" : v.toFixed(digits));

  function bytes(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out.buffer;
  }
  // Decode each result's curves once: mean (float32 bits) and the uint16 envelope.
  for (const r of data.results) {
    if (!r.entropy) continue;
    r.curves = { mean: new Float32Array(bytes(r.entropy.mean)) };
    if (r.entropy.low) {
      r.curves.low = new Uint16Array(bytes(r.entropy.low));
      r.curves.high = new Uint16Array(bytes(r.entropy.high));
    }
  }
  const withHeads = data.results.map((r, i) => i).filter((i) => data.results[i].curves);
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

  function headCurve(r, layer, head) {
    const n = r.bins.starts.length, off = (layer * r.heads + head) * n;
    const mean = Array.from(r.curves.mean.subarray(off, off + n), (v) => (Number.isNaN(v) ? null : v));
    if (!r.curves.low) return { mean: mean, low: mean, high: mean };
    const up = (q) => (q === r.entropy.gap ? null : r.entropy.floor + q * r.entropy.step);
    return {
      mean: mean,
      low: Array.from(r.curves.low.subarray(off, off + n), up),
      high: Array.from(r.curves.high.subarray(off, off + n), up),
    };
  }
  const centers = (bins) => bins.starts.map((a, k) => (a + bins.stops[k] - 1) / 2);
  const ranges = (bins) => bins.starts.map((a, k) => [a, bins.stops[k] - 1]);

  // Mean line with its min–max envelope; hover shows the bin's positions and the exact numbers.
  function band(bins, c, label, color, yaxis, units, legend) {
    const x = centers(bins), traces = [], name = plain(label);
    if (!bins.exact) {
      traces.push({ x: x, y: c.low, yaxis: yaxis, mode: "lines", line: { width: 0 }, hoverinfo: "skip",
                    showlegend: false, legendgroup: name });
      traces.push({ x: x, y: c.high, yaxis: yaxis, mode: "lines", line: { width: 0 }, fill: "tonexty",
                    fillcolor: color + "33", hoverinfo: "skip", showlegend: false, legendgroup: name });
    }
    const custom = ranges(bins).map((p, k) => [p[0], p[1], c.low[k], c.high[k]]);
    const hover = bins.exact
      ? name + "<br>position %{customdata[0]}: %{y:.5f} " + units + "<extra></extra>"
      : name + "<br>positions %{customdata[0]}–%{customdata[1]}: mean %{y:.5f} " + units +
        "<br>min %{customdata[2]:.4f}, max %{customdata[3]:.4f}<extra></extra>";
    traces.push({ x: x, y: c.mean, yaxis: yaxis, mode: "lines", name: name, line: { color: color, width: 1.5 },
                  customdata: custom, hovertemplate: hover, showlegend: legend, legendgroup: name,
                  meta: { role: yaxis === "y" ? "entropy" : "loss" } });
    return traces;
  }

  function statisticValues(view, statistic) {
    const a = data.results[view.a].stats[statistic];
    if (!a) return null;
    if (view.b === null) return a.values;
    const b = data.results[view.b].stats[statistic];
    if (!b) return null;
    return a.values.map((row, l) =>
      row.map((v, h) => (v === null || b.values[l][h] === null ? null : v - b.values[l][h])));
  }

  function drawHeatmap() {
    const view = views[state.view], r = data.results[view.a], stat = r.stats[state.statistic];
    const z = statisticValues(view, state.statistic);
    const note = document.getElementById("statistic-note");
    const units = stat ? stat.units : "";
    note.textContent = stat ? stat.description + (view.b === null ? "" : "; difference " + view.name) :
      (r.undefined[state.statistic] || "not available for this result");
    const hover = "layer %{y}, head %{x}<br>%{z:.4f} " + units + "<extra></extra>";
    const trace = { type: "heatmap", z: z || [[]], x: [...Array(r.heads).keys()], y: [...Array(r.layers).keys()],
                    xgap: 1, ygap: 1, hovertemplate: hover, colorbar: { title: { text: units } },
                    colorscale: view.b === null ? "Viridis" : "RdBu", reversescale: view.b !== null };
    if (view.b !== null) trace.zmid = 0;
    const layout = {
      title: { text: plain((view.b === null ? view.name : "difference " + view.name) + ": " + state.statistic) },
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
    const main = data.results[views[state.view].a];
    const shown = withHeads.filter((i) => sameShape(data.results[i], main));
    const traces = [];
    let longest = 0, L = null;
    shown.forEach((i, k) => {
      const r = data.results[i], color = COLORS[k % COLORS.length];
      longest = Math.max(longest, r.length);
      L = L || r.train_len;
      traces.push(...band(r.bins, headCurve(r, layer, head), r.label, color, "y", "bits", true));
      const loss = { mean: r.loss.mean, low: r.loss.low, high: r.loss.high };
      traces.push(...band(r.bins, loss, r.label + " loss", color, "y2", "nats", false));
    });
    const bx = [], step = Math.max(1, Math.floor(longest / 400));
    for (let i = 0; i < longest; i += step) bx.push(i);
    bx.push(longest - 1);
    traces.push({ x: bx, y: bx.map((i) => Math.log2(i + 1)), mode: "lines", name: "log₂(i + 1)",
                  line: { color: "#777", dash: "dash", width: 1 }, hovertemplate: "log₂(%{x} + 1) = %{y:.4f}<extra></extra>" });
    const shapes = L ? [{ type: "line", x0: L, x1: L, yref: "paper", y0: 0, y1: 1, line: { color: "#444", dash: "dot" } }] : [];
    const annotations = L ? [{ x: L, y: 1, yref: "paper", text: " L = " + L, showarrow: false, yanchor: "top",
                               xanchor: "left" }] : [];
    const layout = {
      title: { text: "layer " + layer + ", head " + head + ": entropy by position" },
      xaxis: { title: { text: "position i" }, anchor: "y2" },
      yaxis: { title: { text: "entropy (bits)" }, domain: [0.36, 1] },
      yaxis2: { title: { text: "loss (nats)" }, domain: [0, 0.26], anchor: "x" },
      shapes: shapes, annotations: annotations, hovermode: "closest", height: 560,
      margin: { t: 80, l: 60, r: 20, b: 50 }, legend: { orientation: "h", y: 1.02, yanchor: "bottom" },
    };
    document.body.dataset.layer = layer;
    document.body.dataset.head = head;
    return Promise.all([Plotly.react("head", traces, layout, CONFIG), drawHeatmap()]);
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

  data.sweeps.forEach(drawSweep);
  const viewSelect = document.getElementById("view-select"), statSelect = document.getElementById("statistic-select");
  if (views.length) {
    state.view = 0;
    fill(viewSelect, views.map((v, i) => [i, v.name]), 0);
    const stats = () => Object.keys(data.results[views[state.view].a].stats);
    fill(statSelect, stats().map((s) => [s, s]), state.statistic);
    viewSelect.addEventListener("change", () => {
      state.view = Number(viewSelect.value);
      if (!stats().includes(state.statistic)) state.statistic = "converged";
      fill(statSelect, stats().map((s) => [s, s]), state.statistic);
      showHead(Math.min(state.layer, data.results[views[state.view].a].layers - 1),
               Math.min(state.head, data.results[views[state.view].a].heads - 1));
    });
    statSelect.addEventListener("change", () => { state.statistic = statSelect.value; drawHeatmap(); });
    showHead(0, 0).then(() => {
      document.getElementById("heatmap").on("plotly_click", (ev) => {
        const p = ev.points[0];
        showHead(Number(p.y), Number(p.x));
      });
      document.body.dataset.readyMs = performance.now().toFixed(0);  // time to interactive, for benchmarks
      document.body.dataset.ready = "1";
    });
  } else {
    document.getElementById("heads-section").hidden = true;
    document.body.dataset.readyMs = performance.now().toFixed(0);
    document.body.dataset.ready = "1";
  }
  window.entropyLens = { data: data, state: state, showHead: showHead };
})();
