"""Headless Chromium for the browser tests: Debian's `chromium` (`playwright install` cannot download
a browser here). Without it the tests skip, unless EXPLORER_REQUIRE_BROWSER=1 (set by .ci/run)
makes that a failure."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]


@pytest.fixture(scope="session")
def browser():
    """One Chromium for the whole session (one `sync_playwright()` per process)."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("EXPLORER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium")
        pytest.skip("no Chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
