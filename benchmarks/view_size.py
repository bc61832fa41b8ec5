"""Size and speed of `entropy-lens view` pages at TinyLlama's shape (22 layers × 32 heads).

    python benchmarks/view_size.py [--lengths 2048 16384] [--results 1 2] [--repeats 3]
                                   [--out benchmarks/results/view_size.json]

For each length and number of results: synthetic results (float32 entropy, loss and sd of the file's
shape, L = 2048) go through `view` (the statistics with every head's departure, the binned curves, the
page; its CPU time); the page's size in bytes; then headless Chromium (tests/browser.py, network
blocked, at this process's nice value) opens it `--repeats` times: the page's own clock says when it
was interactive (heat map and first head drawn: `performance.now()` from navigation start); each load
is in a fresh tab, whose renderer's CPU time until then (DevTools' ThreadTime of its main thread and
ProcessTime of the whole process) says what it costs on a free core; and a click's redraw of a head is
timed. The first load and the medians are kept. On a machine whose cores are busy with
other work the wall times measure the wait for a core as much as the page: read them as upper
bounds, and the CPU times as the work. Without a browser the timings are null and the JSON says why.
Prints a table and writes JSON (README's table: benchmarks/readme_tables.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, parser, table, write_record

ROOT = Path(__file__).resolve().parent.parent
TRAIN_LEN = 2048


def browser_module():
    spec = importlib.util.spec_from_file_location("browser", ROOT / "tests" / "browser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic(length: int, seed: int, layers: int = 22, heads: int = 32):
    """A results object of TinyLlama's shape: log-growing heads with noise, a loss curve."""
    from entropy_lens.results import REQUIRED_META, ScanResult

    rng = np.random.default_rng(seed)
    i = np.arange(length)
    rate = rng.uniform(0.05, 1.0, (layers, heads, 1))
    entropy = (
        (rate * np.log(i + 1.0) + rng.normal(0, 0.05, (layers, heads, length))).clip(0).astype(np.float32)
    )
    loss = (2.5 + 0.1 * np.log1p(np.maximum(i - TRAIN_LEN, 0)) + rng.normal(0, 0.3, length)).astype(
        np.float32
    )
    meta = dict.fromkeys(REQUIRED_META, "synthetic")
    meta.update(
        schema_version=1, length=length, train_len=TRAIN_LEN, scales=np.ones((layers, heads)).tolist()
    )
    meta.update(nope=True, head_dim=64, seed=seed, samples=8, wall_time_s=0.0, model=f"synthetic-{seed}")
    return ScanResult(entropy, entropy**2 + 0.01, loss, loss**2, np.full(length, 8, np.int64), meta=meta)


def measure(length: int, n_results: int, repeats: int, driver, folder: Path) -> dict:
    from plotly.offline import get_plotlyjs

    from entropy_lens.view import view

    results = [(f"result {k}", synthetic(length, k)) for k in range(n_results)]
    start = time.process_time()
    page = view(results)
    build_s = time.process_time() - start
    path = page.save(folder / f"view-{length}-{n_results}.html")
    row = {
        "len": length,
        "results": n_results,
        "layers": 22,
        "heads": 32,
        "points": json.loads(page.html.split('id="entropy-lens-data">', 1)[1].split("</script>", 1)[0])[
            "points"
        ],
        "size_mb": path.stat().st_size / 1e6,
        "plotly_js_mb": len(get_plotlyjs().encode()) / 1e6,
        "build_cpu_s": build_s,
        "first_interactive_ms": None,
        "interactive_ms": None,
        "main_thread_cpu_ms": None,
        "renderer_cpu_ms": None,
        "click_ms": None,
    }
    if driver is not None:
        browser = browser_module()
        loads, thread_cpu, process_cpu, clicks = [], [], [], []
        for _ in range(repeats):
            browser.new_tab(driver)
            loads.append(browser.open_page(driver, path))
            thread_ms, process_ms = browser.renderer_cpu_ms(driver)
            thread_cpu.append(thread_ms)
            process_cpu.append(process_ms)
            clicks.append(
                driver.execute_async_script(
                    "const done = arguments[0], t = performance.now();"
                    "window.entropyLens.showHead(21, 31).then(() => done(performance.now() - t));"
                )
            )
            assert browser.console_errors(driver) == [], "the page logged errors"
            driver.close()
            driver.switch_to.window(driver.window_handles[0])
        row["first_interactive_ms"] = loads[0]  # the first load of this page in this browser
        row["interactive_ms"], row["click_ms"] = statistics.median(loads), statistics.median(clicks)
        row["main_thread_cpu_ms"] = statistics.median(thread_cpu)
        row["renderer_cpu_ms"] = statistics.median(process_cpu)
    return row


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "view_size", repeats=3)
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 16384])
    p.add_argument("--results", type=int, nargs="+", default=[1, 2], help="results per page")
    args = p.parse_args(argv)
    browser = browser_module()
    why = browser.missing()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if why:
            rows = [measure(n, k, args.repeats, None, Path(tmp)) for n in args.lengths for k in args.results]
        else:
            with browser.chromium() as driver:
                rows = [
                    measure(n, k, args.repeats, driver, Path(tmp)) for n in args.lengths for k in args.results
                ]
    print(
        f"view pages, 22 layers x 32 heads, {os.cpu_count()} cores" + (f" (no browser: {why})" if why else "")
    )
    columns = [Column("len", "len"), Column("results", "results"), Column("points", "points")]
    columns += [Column("MB", "size_mb", ".2f"), Column("build CPU s", "build_cpu_s", ".2f")]
    columns += [Column("main CPU ms", "main_thread_cpu_ms", ".0f")]
    columns += [Column("renderer CPU ms", "renderer_cpu_ms", ".0f")]
    columns += [
        Column("first ms", "first_interactive_ms", ".0f"),
        Column("median ms", "interactive_ms", ".0f"),
    ]
    columns += [Column("click ms", "click_ms", ".0f")]
    print(table(rows, columns))
    import plotly

    browser = None if why else "headless Chromium (distribution package), network blocked"
    fields = {"plotly_version": plotly.__version__, "browser": browser, "no_browser": why}
    write_record(args.out, "view_size", **fields, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
