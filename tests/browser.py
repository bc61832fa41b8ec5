"""Headless Chromium for the view's tests and benchmark, with the network blocked.

    reason = missing()                 # None, or why no browser can run here (the tests skip with it)
    with chromium() as driver:         # the distribution's chromium and chromedriver, driven by selenium
        ms = open_page(driver, path)   # waits for the page's `data-ready`; its own time to interactive

The network is off three ways: Chrome DevTools' offline emulation, blocked http(s)/ws(s) URLs, and a host
resolver that resolves nothing; a page that needed a CDN would fail to draw and log errors.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)
INSTALL = "`make test` installs it as root (apt-get install chromium chromium-driver)"


def _first(names) -> str | None:
    return next((shutil.which(n) for n in names if shutil.which(n)), None)


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if not _first(BROWSERS):
        return f"no Chromium on PATH; {INSTALL}, or install it with your package manager"
    if not _first(DRIVERS):
        return f"no chromedriver on PATH; {INSTALL}"
    return None


@contextlib.contextmanager
def chromium(width: int = 1200, height: int = 1800):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _first(BROWSERS)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--allow-file-access-from-files",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(_first(DRIVERS)), options=options)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        driver.execute_cdp_cmd(
            "Network.setBlockedURLs", {"urls": ["http://*", "https://*", "ws://*", "wss://*"]}
        )
        yield driver
    finally:
        driver.quit()


def open_page(driver, path: str | Path, *, timeout: float = 30.0) -> float:
    """Load `path` and wait until the page says it is interactive; returns its own milliseconds from
    navigation start to then (performance.now() when the heat map and the first head are drawn)."""
    driver.get(Path(path).resolve().as_uri())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = driver.execute_script("return document.body && document.body.dataset.readyMs")
        if ready is not None:
            return float(ready)
        time.sleep(0.05)
    raise TimeoutError(f"{path} did not become ready within {timeout} s")


def console_errors(driver) -> list[str]:
    """The browser console's errors (SEVERE) since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
