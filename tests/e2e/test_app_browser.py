"""The app in headless Chromium on the embedded model: prefill, decode steps, errors as toasts.

Needs Debian's `chromium` (/usr/bin/chromium; `playwright install` cannot download a browser here).
Without it these tests skip, unless EXPLORER_REQUIRE_BROWSER=1 (set by .ci/run) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import socket

import pytest

pytestmark = pytest.mark.real_model

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
TIMEOUT_MS = 60_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(embedded_model):
    from explorer.ui.layout import build_demo

    demo = build_demo(embedded_model)
    port = _free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="module")
def browser():
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
def page(browser, app_url, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(app_url)
    yield page
    page.screenshot(path=str(tmp_path / "last.png"), full_page=True)
    page.close()


def test_prefill_then_next_token_updates_the_view(page):
    from playwright.sync_api import expect

    page.locator("#prompt-box textarea").fill("What is the capital of France?")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill", timeout=TIMEOUT_MS)
    expect(page.locator("#kv-cache")).to_contain_text("after prefill: K [1, 3,")
    for k in (1, 2):
        page.locator("#decode-btn").click()
        expect(page.locator("#status")).to_contain_text(f"step {k}: 1 token(s) in", timeout=TIMEOUT_MS)
    expect(page.locator("#journey-table")).to_contain_text("[1, 1, 576] -> [1, 1, 192]")
    expect(page.locator("#generated-text textarea")).to_have_value("The capital of")


def test_errors_are_toasts_that_keep_the_view(page):
    from playwright.sync_api import expect

    page.locator("#decode-btn").click()
    expect(page.get_by_test_id("toast-body").first).to_contain_text("Run the prefill first", timeout=TIMEOUT_MS)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill", timeout=TIMEOUT_MS)
    page.locator("#prompt-box textarea").fill("   ")
    page.locator("#prefill-btn").click()
    expect(page.get_by_test_id("toast-body").last).to_contain_text("The prompt is empty", timeout=TIMEOUT_MS)
    expect(page.locator("#status")).to_contain_text("prefill: ")
