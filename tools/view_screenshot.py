"""A PNG of an `entropy-lens view` page as headless Chromium draws it (the README's screenshot).

    python tools/view_screenshot.py nope.npz rope.npz s14.npz --labels NoPE RoPE "NoPE λ=1.4/√d" \
        --statistic growth --layer 3 --head 1 --out docs/view.png
    python tools/view_screenshot.py stats.npz --stat distance --statistic slope   # a statistic of --stats

Builds the page, opens it in the browser of the tests (tests/browser.py: the distribution's Chromium,
network blocked), picks the row statistic, its per-head statistic and the head, and saves the heads section, its colours reduced to
a 256-colour palette so the file stays small.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+")
    p.add_argument("--labels", nargs="+")
    p.add_argument("--stat", default="entropy", help="the row statistic (entropy, or one of scan --stats)")
    p.add_argument("--statistic", default="growth")
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--head", type=int, default=0)
    p.add_argument("--width", type=int, default=1000)
    p.add_argument("--out", default=str(ROOT / "docs" / "view.png"))
    args = p.parse_args(argv)

    from PIL import Image

    from entropy_lens.view import view

    spec = importlib.util.spec_from_file_location("browser", ROOT / "tests" / "browser.py")
    browser = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(browser)
    if browser.missing():
        raise SystemExit(f"no browser: {browser.missing()}")
    with tempfile.TemporaryDirectory() as tmp, browser.chromium(width=args.width, height=2000) as driver:
        page = view(args.results, labels=args.labels).save(Path(tmp) / "page.html")
        browser.open_page(driver, page)
        driver.execute_script(
            "[['stat-select', arguments[0]], ['statistic-select', arguments[1]]].forEach(([id, value]) => {"
            "const s = document.getElementById(id); s.value = value; s.dispatchEvent(new Event('change')); });",
            args.stat,
            args.statistic,
        )
        driver.execute_async_script(
            "const done = arguments[2]; window.entropyLens.showHead(arguments[0], arguments[1]).then(() => done());",
            args.layer,
            args.head,
        )
        assert browser.console_errors(driver) == [], "the page logged errors"
        png = driver.find_element("id", "heads-section").screenshot_as_png
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, optimize=True)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
