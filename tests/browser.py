"""Headless Chromium for the view's tests and benchmark, with the network blocked.

    reason = missing()                 # None, or why no browser can run here (the tests skip with it)
    with chromium() as driver:         # the distribution's chromium and chromedriver, driven by selenium
        ms = open_page(driver, path)   # waits for the page's `data-ready`; its own time to interactive

The network is off three ways: Chrome DevTools' offline emulation, blocked http(s)/ws(s) URLs, and a host
resolver that resolves nothing; a page that needed a CDN would fail to draw and log errors.

Run as root, Chromium raises its own processes' priority (nice −8 for the browser and its GPU process)
whatever `nice` it was started under; on a machine shared with other work the tests start it through
`setpriv` without CAP_SYS_NICE (where setpriv exists), at the nice value of the tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
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
    wrapper = tempfile.TemporaryDirectory(prefix="entropy-lens-chromium-")
    options.binary_location = _unprivileged(_first(BROWSERS), Path(wrapper.name))
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--allow-file-access-from-files",
        "--disable-breakpad",  # no crash reporter processes
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(_first(DRIVERS)), options=options)
    driver.command_executor.client_config.timeout = 900  # a starved browser can take minutes to answer
    try:
        block_network(driver)
        yield driver
    finally:
        driver.quit()
        wrapper.cleanup()


def _unprivileged(binary: str, folder: Path) -> str:
    """`binary`, or (as root, with setpriv) a script that runs it at this process's nice value (chromedriver
    starts it at 0) without the right to raise its priority."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return binary
    script = folder / "chromium"
    script.write_text(
        f"#!/bin/sh\nexec {setpriv} --inh-caps=-sys_nice --bounding-set=-sys_nice -- nice -n {os.nice(0)} "
        f'{binary} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


def new_tab(driver) -> None:
    """Open and switch to a fresh tab (a new renderer process: its CPU clock starts near 0), with the
    network blocked as in every tab and the page's CPU metrics on."""
    driver.switch_to.new_window("tab")
    block_network(driver)
    driver.execute_cdp_cmd("Performance.enable", {"timeDomain": "threadTicks"})


def renderer_cpu_ms(driver) -> tuple[float, float]:
    """CPU milliseconds so far of the current tab's main thread and of its whole renderer process
    (DevTools' Performance metrics ThreadTime and ProcessTime; `new_tab` turns them on)."""
    metrics = {m["name"]: m["value"] for m in driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
    return 1000 * metrics["ThreadTime"], 1000 * metrics["ProcessTime"]


def block_network(driver) -> None:
    """DevTools' offline emulation and blocked http(s)/ws(s) URLs, for the current tab."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*", "ws://*", "wss://*"]})


def open_page(driver, path: str | Path, *, timeout: float = 600.0) -> float:
    """Load `path` and wait until the page says it is interactive; returns its own milliseconds from
    navigation start to then (performance.now() when the heat map and the first head are drawn). The
    timeout is generous: on a loaded machine a browser under `nice` waits long for a core."""
    driver.get(Path(path).resolve().as_uri())
    return wait_ready(driver, timeout=timeout, what=str(path))


def wait_ready(driver, *, timeout: float = 600.0, what: str = "the page") -> float:
    """Wait for the current document's `data-ready-ms` (see open_page) and return it: one WebDriver call
    that the page answers itself (so waiting costs the browser next to nothing)."""
    from selenium.common.exceptions import TimeoutException

    driver.set_script_timeout(timeout)
    try:
        ready = driver.execute_async_script(
            "const done = arguments[0], look = () => document.body && document.body.dataset.readyMs;"
            "if (look()) return done(look());"
            "const timer = setInterval(() => { if (look()) { clearInterval(timer); done(look()); } }, 20);"
        )
    except TimeoutException:
        raise TimeoutError(f"{what} did not become ready within {timeout} s") from None
    return float(ready)


def console_errors(driver) -> list[str]:
    """The browser console's errors (SEVERE) since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
