"""Exports in headless Chromium on the tiny Llama: each export's download button appears once its file
is written and downloads it; a new Prefill or Reset (which free the session and delete its exports)
hides the buttons instead of leaving dead links; the view exported as HTML opens offline as drawn."""

from __future__ import annotations

from pathlib import Path

import pytest
from served_app import serving
from tiny_models import tiny_model

from explorer.ui.hosting import LOCAL

TIMEOUT_MS = 30_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"


@pytest.fixture(scope="module")
def app_url():
    with serving(tiny_model("llama"), LOCAL) as (url, _):
        yield url


def prefill_and_open_exports(page) -> None:
    """Prefill, then open the settings (a sidebar) and the accordion that holds the exports."""
    from playwright.sync_api import expect

    page.locator("#prompt-box textarea").fill("Hello there")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    page.locator("#settings .toggle-button").click()
    page.locator("#lecture-tools").get_by_text("Share a link, export the run").click()


@pytest.mark.parametrize("buttons, status", [(("#reset-btn", "#reset-yes"), None), (("#prefill-btn",), "prefill:")])
def test_the_download_buttons_go_when_their_session_is_freed(new_page, app_url, buttons, status):
    from playwright.sync_api import expect

    page = new_page(app_url, 1280, 720, TIMEOUT_MS, accept_downloads=True)
    prefill_and_open_exports(page)
    for download in ("#export-file", "#html-file"):
        expect(page.locator(download)).to_be_hidden()  # nothing written yet
    page.locator("#export-btn").click()
    expect(page.locator("#export-file")).to_contain_text("Download explorer-run-step-0.json (", timeout=TIMEOUT_MS)
    page.locator("#html-btn").click()
    expect(page.locator("#html-file")).to_contain_text("Download explorer-forward-step-0.html (", timeout=TIMEOUT_MS)
    page.locator("#export-file").scroll_into_view_if_needed()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "exports.png"))
    with page.expect_download() as download:
        page.locator("#export-file").click()
    assert download.value.suggested_filename == "explorer-run-step-0.json"
    for button in buttons:  # Reset asks first
        page.locator(button).click()
    if status:
        expect(page.locator("#status")).to_contain_text(status, timeout=TIMEOUT_MS)
    for download in ("#export-file", "#html-file"):
        expect(page.locator(download)).to_be_hidden(timeout=TIMEOUT_MS)


def test_the_view_exported_as_html_opens_offline_as_drawn(new_page, browser, app_url, tmp_path):
    from playwright.sync_api import expect

    page = new_page(app_url, 1280, 720, TIMEOUT_MS, accept_downloads=True)
    prefill_and_open_exports(page)
    page.get_by_role("tab", name="Attention").click()
    page.wait_for_function("() => document.querySelector('#attention-plot .js-plotly-plot')?.layout?.meta?.step === 0")
    page.locator("#html-btn").click()
    expect(page.locator("#html-file")).to_contain_text("explorer-attention-step-0.html", timeout=TIMEOUT_MS)
    with page.expect_download() as download:
        page.locator("#html-file").click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    offline = browser.new_context(offline=True)
    try:
        slide = offline.new_page()
        slide.goto(path.as_uri())
        slide.wait_for_function("() => document.querySelector('.js-plotly-plot')?.layout?.meta?.view === 'attention'",
                                timeout=TIMEOUT_MS)
    finally:
        offline.close()
