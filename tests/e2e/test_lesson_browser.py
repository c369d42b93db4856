"""The lesson, going on from an earlier step, the sampling preview and Reset's question, in headless
Chromium on the embedded model at 1280x720 (a lecturer's projector). Screenshots of every lesson page
go to artifacts/e2e/lesson-<page>.png."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from explorer.lesson import PAGES

pytestmark = pytest.mark.real_model

TIMEOUT_MS = 90_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
TAB_NAMES = {"forward": "Forward pass", "journey": "Journey", "attention": "Attention", "kv_cache": "KV cache",
             "sampling": "Sampling", "roofline": "Roofline", "lens": "Logit lens",
             "equivalence": "Equivalent ≠ identical"}
PLOTS = {"forward": "forward-plot", "journey": "journey-plot", "attention": "attention-plot",
         "kv_cache": "kv-plot", "sampling": "sampling-plot", "roofline": "roofline-plot", "lens": "lens-plot",
         "equivalence": "equivalence-plot"}
DRAWN = """([id, step]) => { const g = document.querySelector('#' + id + ' .js-plotly-plot');
                             return !!(g && g.layout && g.layout.meta && g.layout.meta.step === step); }"""
TITLE = "id => document.querySelector('#' + id + ' .js-plotly-plot').layout.title.text"
FITS = """id => { const f = document.querySelector('#' + id + ' .js-plotly-plot').getBoundingClientRect();
                  const t = document.querySelector('#lesson-text').getBoundingClientRect();
                  return f.top >= 0 && f.bottom <= innerHeight && f.height >= 360 && t.top >= 0 && t.bottom <= f.top; }"""


def prefill(page, prompt: str) -> None:
    page.locator("#prompt-box textarea").fill(prompt)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)


def next_tokens(page, first: int, last: int) -> None:
    for k in range(first, last + 1):
        page.locator("#decode-btn").click()
        expect(page.locator("#status")).to_contain_text(f"step {k}: 1 token(s) in", timeout=TIMEOUT_MS)


def strip_ids(page) -> list[str]:
    return page.locator("#token-strip .tok sub").all_inner_texts()


def test_the_lesson_turns_its_pages_by_key_each_with_its_view_drawn(open_app):
    page = open_app(1280, 720)
    prefill(page, "What is the capital of France?")
    page.locator("body").click(position={"x": 5, "y": 5})  # focus outside the text fields
    page.keyboard.press("l")
    for index, lesson_page in enumerate(PAGES):
        expect(page.locator("#lesson-text")).to_contain_text(f"Lesson {index + 1} of {len(PAGES)}: "
                                                              f"{lesson_page.title}", timeout=TIMEOUT_MS)
        experiment = lesson_page.view == "equivalence"  # no view of the run: its figure waits for its button
        page.wait_for_function(DRAWN, arg=[PLOTS[lesson_page.view], None if experiment else 1], timeout=TIMEOUT_MS)
        tab = page.get_by_role("tab", name=TAB_NAMES[lesson_page.view], exact=True)
        expect(tab).to_have_attribute("aria-selected", "true")
        # the page's text and its figure on the one screen, the figure whole, once the page has fitted the
        # figure to the room the new text leaves (it refits as the text reflows)
        with contextlib.suppress(PlaywrightTimeoutError):  # if it never fits, the asserts below say how
            page.wait_for_function(FITS, arg=PLOTS[lesson_page.view], timeout=10_000)
        figure = page.locator(f"#{PLOTS[lesson_page.view]} .js-plotly-plot").bounding_box()
        text = page.locator("#lesson-text").bounding_box()
        assert figure["y"] >= 0 and figure["y"] + figure["height"] <= 720 and figure["height"] >= 360, \
            (lesson_page.key, figure)
        assert text["y"] >= 0 and text["y"] + text["height"] <= figure["y"], (lesson_page.key, text, figure)
        page.screenshot(path=str(ARTIFACTS / f"lesson-{index + 1}-{lesson_page.key}.png"))
        page.keyboard.press("ArrowRight")
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in")  # the lesson ran step 1
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#lesson-text")).to_contain_text(f"Lesson {len(PAGES) - 1} of")
    page.keyboard.press("l")  # ends it: the prompt comes back, and what the lesson changed is put back
    expect(page.locator("#lesson")).to_have_count(0)
    expect(page.locator("#prompt-box textarea")).to_be_visible()
    expect(page.locator("#what-if-batch input")).to_have_value("as run", timeout=TIMEOUT_MS)  # not its B = 64
    expect(page.get_by_role("tab", name="Forward pass", exact=True)).to_have_attribute("aria-selected", "true")


def test_next_token_at_an_earlier_step_asks_and_continues_from_it(open_app):
    sampled = "?sample=1&temperature=1.2&top_p=1&top_k=0&seed=5"
    page = open_app(1280, 720, query=sampled)
    prefill(page, "Once upon a time")
    next_tokens(page, 1, 5)
    page.locator("#step-select input").click()
    page.get_by_role("option", name="step 2", exact=True).click()
    expect(page.locator("#status")).to_contain_text("step 2: 1 token(s) in")
    expect(page.locator("#token-strip .tok.generated")).to_have_count(2)  # the strip as it was after step 2
    page.locator("#decode-btn").click()
    expect(page.locator("#branch-offer")).to_be_visible()
    expect(page.locator("#status")).to_contain_text("drops steps 3 to 5")
    page.locator("#branch-btn").click()
    expect(page.locator("#status")).to_contain_text("step 3: 1 token(s) in", timeout=TIMEOUT_MS)
    expect(page.locator("#branch-offer")).to_have_count(0)
    branched = strip_ids(page)

    fresh = open_app(1280, 720, query=sampled)  # a run that stopped at step 2, then went on
    prefill(fresh, "Once upon a time")
    next_tokens(fresh, 1, 3)
    assert strip_ids(fresh) == branched


def test_a_moved_sampling_control_previews_and_moving_it_back_shows_the_steps_own_draw(open_app):
    page = open_app(1280, 720, query="?sample=1&temperature=0.8&top_p=0.9&top_k=50&seed=2")
    prefill(page, "Write a story.")
    page.get_by_role("tab", name="Sampling", exact=True).click()
    page.wait_for_function(DRAWN, arg=["sampling-plot", 0], timeout=TIMEOUT_MS)
    own = page.evaluate(TITLE, "sampling-plot")
    drawn = page.locator("#token-strip .tok.next sub").inner_text()
    assert f"(id {drawn})" in own and "PREVIEW" not in own
    page.locator("#settings .toggle-button").click()
    page.get_by_text("Sampling: greedy or sample").click()
    box = page.locator("#temperature input[type=number]")
    for value, preview in (("1.6", True), ("0.8", False)):
        for _ in range(3):  # the box may miss the first keystrokes while the accordion opens
            box.fill(value)
            box.press("Enter")
            try:
                page.wait_for_function(f"id => document.querySelector('#' + id + ' .js-plotly-plot').layout.title"
                                       f".text.includes('PREVIEW') === {str(preview).lower()}", arg="sampling-plot",
                                       timeout=15_000)
                break
            except Exception:  # noqa: BLE001 - try the keystrokes again
                continue
        title = page.evaluate(TITLE, "sampling-plot")
        assert ("PREVIEW" in title) == preview and f"id {drawn}" in title
    assert page.evaluate(TITLE, "sampling-plot") == own


def test_reset_asks_first(open_app):
    page = open_app(1280, 720)
    prefill(page, "Hello")
    page.locator("#reset-btn").click()
    expect(page.locator("#reset-confirm")).to_be_visible()
    page.locator("#reset-no").click()
    expect(page.locator("#reset-confirm")).to_have_count(0)
    expect(page.locator("#status")).to_contain_text("prefill:")  # kept
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("r")
    expect(page.locator("#reset-confirm")).to_be_visible()
    page.keyboard.press("r")  # R again: yes
    expect(page.locator("#status")).to_have_text(re.compile(r"^\s*$"))
    expect(page.locator("#reset-confirm")).to_have_count(0)
