"""Each of the lab's experiments in the browser at 1280x720 on the embedded model: picked from the
menu, run (its button in sight) on the prefill's prompt, its figure drawn with its top on screen
(above y = 720) and its lesson text beside it, also on screen once the experiment's setup folds away; a
screenshot of each is kept (artifacts/e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

from explorer.lab.table import LAB  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"  # open_app makes it
TIMEOUT_MS = 180_000  # a lab run holds the model: seconds to a minute on a busy 2-core CPU
# every bar label and text point of the lab's figure: its box, its font size and its text; and the
# boxes of the subplots' titles and the figure's title (annotations, gtitle)
LAB_LABELS = """() => {
  const root = document.querySelector('#lab-plot .js-plotly-plot');
  const box = (e) => { const r = e.getBoundingClientRect(); return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}; };
  const labels = [...root.querySelectorAll('text.bartext, .textpoint text')].filter((e) => e.textContent.trim())
    .map((e) => ({text: e.textContent, size: parseFloat(getComputedStyle(e).fontSize), ...box(e)}));
  const titles = [...root.querySelectorAll('.annotation-text, .gtitle')].map((e) => ({text: e.textContent, ...box(e)}));
  return {figure: box(root), labels, titles};
}"""
LAB_FIGURE = """() => {
  const e = document.querySelector('#lab-plot .js-plotly-plot');
  if (!e || !e.layout || !e.layout.meta) return null;
  const r = e.getBoundingClientRect();
  return {view: e.layout.meta.view, top: r.top, left: r.left, right: r.right, bottom: r.bottom};
}"""


@pytest.mark.real_model
@pytest.mark.parametrize("name", list(LAB))
def test_an_experiment_draws_its_figure_on_screen_with_its_lesson_beside_it(open_app, name):
    page = open_app(1280, 720)
    page.locator("#prompt-box textarea").fill("Explain what a KV cache holds.")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    page.get_by_role("tab", name="Lab").click()
    page.locator("#lab-select input").click()
    page.get_by_role("option", name=LAB[name].title).click()
    expect(page.locator("#lab-text")).to_contain_text(LAB[name].what[:40])
    menu = next((param for param in LAB[name].params if param.choices), None)
    if menu is None:  # a choice is a menu of names, shown only for an experiment that has one
        expect(page.locator("#lab-choice")).to_be_hidden()
    else:
        expect(page.locator("#lab-choice input")).to_have_value(menu.name_of(menu.default))
    button = page.locator("#lab-btn").bounding_box()
    assert button["y"] + button["height"] <= 720, button  # in sight without scrolling
    page.locator("#lab-btn").click()
    page.wait_for_function(f"() => {{ const f = ({LAB_FIGURE})(); return f && f.view === 'lab-{name}'; }}",
                           timeout=TIMEOUT_MS)
    figure = page.evaluate(LAB_FIGURE)
    text = page.locator("#lab-text").bounding_box()
    page.screenshot(path=str(ARTIFACTS / f"lab-{name}-1280x720.png"))
    assert 0 <= figure["top"] < 720 - 200, figure  # most of the figure's height is on screen
    assert figure["right"] <= 1280 and text["x"] >= figure["right"] - 1 and text["y"] < 720, (figure, text)
    expect(page.locator("#lab-text")).not_to_contain_text(LAB[name].what[:40])  # its lesson, from the run
    drawn = page.evaluate(LAB_LABELS)
    whole = drawn["figure"]
    for label in drawn["labels"]:  # no label cut by the figure's edge, none too small to read, none on a title
        assert whole["x0"] - 1 <= label["x0"] and label["x1"] <= whole["x1"] + 1, label
        assert whole["y0"] - 1 <= label["y0"] and label["y1"] <= whole["y1"] + 1, label
        assert label["size"] >= 10, label
        for title in drawn["titles"]:
            overlap = min(label["x1"], title["x1"]) - max(label["x0"], title["x0"]) > 1 and \
                min(label["y1"], title["y1"]) - max(label["y0"], title["y0"]) > 1
            assert not overlap, (label, title)
