"""Export in headless Chromium on the tiny Llama: the download box offers the file, and a new Prefill or
Reset (which free the session and delete its export) empties the box instead of leaving a dead link."""

from __future__ import annotations

import pytest
from served_app import serving
from tiny_models import tiny_model

from explorer.ui.hosting import LOCAL

TIMEOUT_MS = 30_000
DOWNLOAD_LINK = "#export-file a[download]"


@pytest.fixture(scope="module")
def app_url():
    with serving(tiny_model("llama"), LOCAL) as (url, _):
        yield url


@pytest.mark.parametrize("buttons, status", [(("#reset-btn", "#reset-yes"), None), (("#prefill-btn",), "prefill:")])
def test_the_download_box_empties_when_its_session_is_freed(new_page, app_url, buttons, status):
    from playwright.sync_api import expect

    page = new_page(app_url, 1280, 720, TIMEOUT_MS)
    page.locator("#prompt-box textarea").fill("Hello there")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:")
    page.locator("#settings .toggle-button").click()  # the settings (a sidebar) hold it
    page.locator("#lecture-tools").get_by_text("Share a link, export the run").click()
    page.locator("#export-btn").click()
    expect(page.locator(DOWNLOAD_LINK)).to_have_attribute("download", "explorer-run-step-0.json")
    for button in buttons:  # Reset asks first
        page.locator(button).click()
    if status:
        expect(page.locator("#status")).to_contain_text(status)
    expect(page.locator(DOWNLOAD_LINK)).to_have_count(0)
