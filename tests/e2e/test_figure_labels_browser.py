"""The labels of the Forward pass, Journey and Roofline figures as Chromium draws them at 1280x720,
after Prefill and a Next token with the embedded model and the chat template: no text element of a
plot overlaps another and none is cut with an ellipsis (each line of a label whole) or by its
subplot's edge; and the long titles (those three, Attention, Logit lens) neither meet plotly's
modebar nor run off the figure. The figures' JSON cannot show this (plotly.js
places and sizes the text), so the test reads each `<text>` element's bounding box on the page.

One page; a screenshot of each figure goes to artifacts/e2e/labels-<view>.png.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.real_model

TIMEOUT_MS = 60_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PROMPT = "Explain in one sentence why the sky is blue."
TABS = {"forward": "Forward pass", "journey": "Journey", "roofline": "Roofline"}
TITLED = {"attention": "Attention", "lens": "Logit lens"}  # long titles: checked against the modebar
SLACK_PX = 1  # boxes that touch within a pixel (anti-aliasing) do not count
# Every visible text element of a plot's SVG layers (not the modebar's), its box on the page, and the
# pairs whose boxes overlap by more than SLACK_PX both ways; the texts cut with an ellipsis or by the
# edge of the subplot they are drawn in.
READ_LABELS = """([id, slack]) => {
  const g = document.querySelector(`#${id} .js-plotly-plot`);
  const texts = [...g.querySelectorAll('svg.main-svg text')].filter(t => {
    const s = getComputedStyle(t), r = t.getBoundingClientRect();
    return t.textContent.trim() && s.visibility !== 'hidden' && s.display !== 'none' && s.opacity !== '0'
      && r.width > 0 && r.height > 0;
  }).map(t => { const r = t.getBoundingClientRect();
                return {text: t.textContent, box: [r.left, r.top, r.right, r.bottom]}; });
  const overlaps = [];
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const a = texts[i].box, b = texts[j].box;
    const dx = Math.min(a[2], b[2]) - Math.max(a[0], b[0]), dy = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
    if (dx > slack && dy > slack) overlaps.push([texts[i].text, texts[j].text]);
  }
  // text on a subplot's clipped trace layer that runs past the subplot's plot area is cut there
  // the page scales a figure drawn at its own size into its room (a CSS transform): the plot areas,
  // in plotly's pixels, scaled as the text boxes are
  const box = g.getBoundingClientRect(), full = g._fullLayout;
  const sx = box.width / full.width, sy = box.height / full.height;
  const clipped = [...g.querySelectorAll('g.subplot')].flatMap(sub => {
    const [, x, y] = sub.getAttribute('class').match(/subplot (x\d*)(y\d*)/) || [];
    if (!x) return [];
    const xa = full[x.replace('x', 'xaxis')], ya = full[y.replace('y', 'yaxis')];
    const area = [box.left + xa._offset * sx, box.top + ya._offset * sy, box.left + (xa._offset + xa._length) * sx,
                  box.top + (ya._offset + ya._length) * sy];
    return [...sub.querySelectorAll('text')].filter(t => t.closest('[clip-path]') && t.textContent.trim())
      .map(t => [t.textContent, t.getBoundingClientRect()])
      .filter(([, r]) => r.width > 0 && (r.left < area[0] - slack || r.right > area[2] + slack
                                         || r.top < area[1] - slack || r.bottom > area[3] + slack))
      .map(([text]) => text);
  });
  return {step: g.layout.meta.step, count: texts.length, overlaps,
          cut: texts.map(t => t.text).filter(t => t.includes('…')).concat(clipped)};
}"""


# The title's box and the modebar's (plotly shows it on hover: its place is kept while hidden).
READ_TITLE = """(id) => {
  const g = document.querySelector(`#${id} .js-plotly-plot`), box = g.getBoundingClientRect();
  const title = g.querySelector('.gtitle').getBoundingClientRect();
  const bar = g.querySelector('.modebar-container .modebar') || g.querySelector('.modebar');
  const modebar = bar.getBoundingClientRect();
  const meets = title.right > modebar.left && title.left < modebar.right && title.bottom > modebar.top
    && title.top < modebar.bottom;
  return {step: g.layout.meta.step, meets, inside: title.right <= box.right && title.left >= box.left && title.top >= box.top,
          title: g.querySelector('.gtitle').textContent};
}"""


def shown(page, view: str, tab: str, step: int) -> str:
    """Select `tab` and wait until its plot draws `step`; the plot's elem_id."""
    page.get_by_role("tab", name=tab, exact=True).click()
    plot = "kv-plot" if view == "kv_cache" else f"{view}-plot"
    page.wait_for_function(f"() => {{ const g = document.querySelector('#{plot} .js-plotly-plot');"
                           f" return g && g.layout && g.layout.meta && g.layout.meta.step === {step}; }}",
                           timeout=TIMEOUT_MS)
    return plot


def test_no_label_of_the_forward_journey_or_roofline_figure_is_cut_or_overlaps(open_app):
    page = open_app(1280, 720)
    page.locator("#prompt-box textarea").fill(PROMPT)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
    found, titles = {}, {}
    for view, tab in (TABS | TITLED).items():
        plot = shown(page, view, tab, 1)
        page.locator(f"#{plot}").screenshot(path=str(ARTIFACTS / f"labels-{view}.png"))
        titles[view] = page.evaluate(READ_TITLE, plot)
        if view in TABS:
            found[view] = page.evaluate(READ_LABELS, [plot, SLACK_PX])
    assert all(labels["count"] > 10 for labels in found.values())  # each figure's labels were read
    assert {view: (labels["overlaps"], labels["cut"]) for view, labels in found.items()} == {
        view: ([], []) for view in TABS}
    assert {view: (t["meets"], t["inside"]) for view, t in titles.items()} == {
        view: (False, True) for view in titles}, titles
