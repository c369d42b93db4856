"""The roofline's what-if controls in headless Chromium on the embedded model: typing a batch moves
the points and rewrites the title, with no model run (the status line and the step stay as they
were), and the what-if is kept when the next step redraws the roofline. A screenshot goes to
artifacts/e2e/roofline-what-if.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.real_model

TIMEOUT_MS = 60_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
READ_ROOFLINE = """() => {
  const g = document.querySelector('#roofline-plot .js-plotly-plot');
  if (!g || !g.layout || !g.layout.meta) return null;
  const points = g._fullData.find(t => t.name === 'decode analytic');  // decoded: x is a typed array
  const x = points ? Array.from(points.x) : [];
  return {step: g.layout.meta.step, title: g.layout.title.text,
          at: points ? Object.fromEntries(points.customdata.map((name, i) => [name, x[i]])) : {}};
}"""


def test_the_batch_what_if_moves_the_points_without_a_model_run(open_app):
    page = open_app(1920, 1080)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
    page.get_by_role("tab", name="Roofline").click()
    page.wait_for_function(f"() => {{ const r = ({READ_ROOFLINE})(); return r && r.step === 1; }}")
    before, status = page.evaluate(READ_ROOFLINE), page.locator("#status").inner_text()
    page.locator("body").click(position={"x": 960, "y": 8})  # focus outside the text fields
    page.keyboard.press("s")  # the settings, where the what-ifs are
    page.locator("#what-if-batch input").fill("64")
    page.locator("#what-if-batch input").press("Enter")
    page.wait_for_function(f"() => ({READ_ROOFLINE})().title.startsWith('What-if B = 64')", timeout=TIMEOUT_MS)
    after = page.evaluate(READ_ROOFLINE)
    assert after["at"]["mlp.down_proj"] > 30 * before["at"]["mlp.down_proj"]  # a GEMM's intensity grows with B
    assert after["at"]["attn.scores"] == pytest.approx(before["at"]["attn.scores"], rel=0.01)  # attention's not
    assert page.locator("#status").inner_text() == status and after["step"] == 1  # no model run
    page.locator("#roofline-plot").screenshot(path=str(ARTIFACTS / "roofline-what-if.png"))
    page.locator("#decode-btn").click()  # the next step's roofline keeps the what-if
    page.wait_for_function(f"() => {{ const r = ({READ_ROOFLINE})(); return r && r.step === 2; }}",
                           timeout=TIMEOUT_MS)
    assert page.evaluate(READ_ROOFLINE)["title"].startswith("What-if B = 64")
