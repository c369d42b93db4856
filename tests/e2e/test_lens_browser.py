"""The logit lens tab in Chromium at 1280x720: the key 7 draws it, the settings recolour it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.real_model

TIMEOUT_MS = 90_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
LENS = "() => document.querySelector('#lens-plot .js-plotly-plot')?.layout?.meta?.step === 0"
HOVER = "() => document.querySelector('#lens-plot .hoverlayer')?.textContent ?? ''"
COLOUR_UNIT = "() => document.querySelector('#lens-plot .js-plotly-plot').data[0].colorbar.title.text"


def test_key_7_draws_the_lens_and_the_settings_colour_it_by_entropy(open_app):
    page = open_app(1280, 720)
    page.locator("#prompt-box textarea").fill("The capital of France is")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    page.locator("body").click(position={"x": 5, "y": 5})  # focus outside the text fields
    page.keyboard.press("7")
    page.wait_for_function(LENS, timeout=TIMEOUT_MS)
    expect(page.get_by_role("tab", name="Logit lens", exact=True)).to_have_attribute("aria-selected", "true")
    assert page.locator("#lens-plot").bounding_box()["y"] < 720 - 300  # the figure starts on the screen
    assert page.evaluate(COLOUR_UNIT) == "p"
    page.screenshot(path=str(ARTIFACTS / "lens-1280.png"))
    cells = page.locator("#lens-plot .nsewdrag").first.bounding_box()
    page.mouse.move(cells["x"] + cells["width"] * 0.9, cells["y"] + cells["height"] * 0.1)  # the last layer's cell
    page.wait_for_function(f"() => ({HOVER})().includes('bits')", timeout=TIMEOUT_MS)
    hover = page.evaluate(HOVER)  # the template filled from the cell's values by Plotly itself
    assert re.match(r"layer \d+, position \d+: .+top 5 \(computed over the full vocabulary\):(  \S+  [01]\.\d{3}){5}"
                    r"next token .+: [01]\.\d{3}entropy \d+\.\d\d bits$", hover), hover
    page.locator("#settings .toggle-button").click()
    page.get_by_label("entropy of the distribution").check()
    page.wait_for_function(f"() => ({COLOUR_UNIT})() === 'bits'", timeout=TIMEOUT_MS)
