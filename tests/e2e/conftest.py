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
from pathlib import Path

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
    page of the app at `url` in a new browser context (`context_options` go to `browser.new_context`,
    e.g. `extra_http_headers`), once its load event has run: the page enables Prefill then, after a
    link's settings are in the controls. Every page it opened is closed when the test ends."""
    from playwright.sync_api import expect

    contexts = []

    def open_page(url: str, width: int = 1400, height: int = 1000, timeout_ms: int = 30_000, **context_options):
        context = browser.new_context(viewport={"width": width, "height": height}, **context_options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        page.goto(url)
        expect(page.locator("#prefill-btn")).to_be_enabled(timeout=timeout_ms)
        return page

    yield open_page
    for context in contexts:
        context.close()  # a no-op for one the test closed itself


ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"  # the browser tests' screenshots


@pytest.fixture(scope="session")
def embedded_app_url(embedded_model):
    """The app on the embedded model with the local limits, served once for the session: every test opens
    pages of its own (their sessions end as the pages close), so the modules share one server."""
    from served_app import serving

    from explorer.ui.hosting import LOCAL

    with serving(embedded_model, LOCAL) as (url, _):
        yield url


@pytest.fixture
def open_app(new_page, embedded_app_url):
    """`open_app(width=1280, height=720, query="", **context_options)`: this test's own freshly loaded
    page of the embedded app, once its prompt box shows (a module may define its own `open_app`)."""
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def open_page(width: int = 1280, height: int = 720, query: str = "", **context_options):
        page = new_page(embedded_app_url + query, width, height, 60_000, **context_options)
        expect(page.locator("#prompt-box textarea")).to_be_visible()
        return page

    return open_page
