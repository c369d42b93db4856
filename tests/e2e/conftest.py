"""Headless Chromium for the browser tests: Debian's `chromium` (`playwright install` cannot download
a browser here). Without it the tests skip, unless EXPLORER_REQUIRE_BROWSER=1 (set by .ci/run)
makes that a failure.

One browser serves the whole session; every test opens its own pages with `new_page` (each in a
browser context of its own, so no cookie, storage or connection is shared), and they are closed when
the test ends, passed or failed: no test starts from a page another test left.
"""

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


@pytest.fixture
def new_page(browser):
    """`new_page(url, width=1400, height=1000, timeout_ms=30_000, **context_options)`: a freshly loaded
    page of `url` in a new browser context (`context_options` go to `browser.new_context`, e.g.
    `extra_http_headers`). Every page it opened is closed when the test ends."""
    contexts = []

    def open_page(url: str, width: int = 1400, height: int = 1000, timeout_ms: int = 30_000, **context_options):
        context = browser.new_context(viewport={"width": width, "height": height}, **context_options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        page.goto(url)
        return page

    yield open_page
    for context in contexts:
        context.close()  # a no-op for one the test closed itself
