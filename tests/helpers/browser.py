"""A real Chromium for the browser tests: Debian's `chromium` and `chromium-driver`, driven by Selenium.

tests/services.sh installs both. Every session gets a fresh profile (a directory of the test's
own), no background networking, and records the browser console and the network log so that a
test can assert that a page made no failed request and logged no error.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

# Not LLMWATCH_*: the config loader reads that prefix as overrides of its own fields.
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def chromium(profile: Path) -> Any:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail(
            f"no Chromium at {CHROMIUM} or no chromedriver at {CHROMEDRIVER}: run tests/services.sh (installs Debian's chromium and chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # The driver path is given, so Selenium Manager never tries to download one.
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    # A fresh profile opens a new-tab page that asks the network for its tiles; start from a blank
    # page and drop what it logged, so that the logs a test reads are its own page's.
    driver.get("about:blank")
    driver.get_log("browser")
    driver.get_log("performance")
    return driver


@pytest.fixture(name="browser")
def browser_fixture(tmp_path: Path) -> Iterator[Any]:
    """A Chromium of the test's own; import `browser_fixture` into a test module to use `browser`."""
    driver = chromium(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry.get("level") in ("SEVERE", "ERROR")]


def network_events(driver: Any) -> list[dict]:
    """The DevTools network events recorded since the last call (the log is drained on read)."""
    out = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method", "").startswith("Network."):
            out.append(message)
    return out


def requested_urls(events: list[dict]) -> list[str]:
    return [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]


def failed_requests(events: list[dict]) -> list[str]:
    failed = [
        f"{e['params'].get('errorText')} ({e['params'].get('requestId')})"
        for e in events
        if e["method"] == "Network.loadingFailed"
    ]
    failed += [
        f"HTTP {e['params']['response']['status']} {e['params']['response']['url']}"
        for e in events
        if e["method"] == "Network.responseReceived" and e["params"]["response"].get("status", 0) >= 400
    ]
    return failed


def screenshot(driver: Any, name: str, fallback: Path) -> Path:
    """Whole-page PNG: into $SAVE_SCREENSHOTS_TO (docs/screenshots when refreshing them), else the test's directory."""
    folder = Path(os.environ.get("SAVE_SCREENSHOTS_TO") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    height = int(driver.execute_script("return Math.min(document.documentElement.scrollHeight, 6000)"))
    driver.set_window_size(1280, max(700, height + 100))
    path = folder / name
    driver.save_screenshot(str(path))
    driver.set_window_size(1280, 900)
    return path
