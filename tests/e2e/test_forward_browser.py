"""The Forward pass view in headless Chromium, as a lecturer uses it: the first tab, drawn after
Prefill with the embedded model's measured shapes, the decode step's beside the prefill's after
Next token, a click on a node pinning its explanation, and the shape-only Qwen3-8B preset; normal
and presenter mode.

Each test opens its own page. Screenshots (prefill and step 3 of the embedded model and of shape-only
Qwen3-8B, normal and presenter) go to artifacts/e2e/forward-*.png.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.real_model

TIMEOUT_MS = 60_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PROMPT = "What is the capital of France?"
# The forward figure: its step, its traces' names and the labels' text, and each node's page position.
READ_FORWARD = """() => {
  const g = document.querySelector('#forward-plot .js-plotly-plot');
  if (!g || !g.layout || !g.layout.meta) return null;
  const trace = name => g.data.find(t => t.name === name);
  const nodes = trace('nodes'), labels = trace('labels');
  const xa = g._fullLayout.xaxis, ya = g._fullLayout.yaxis, box = g.getBoundingClientRect();
  const scale = box.width / g._fullLayout.width;  // the figure is scaled to fit the page (assets/shortcuts.js)
  const at = {};
  (nodes ? nodes.customdata : []).forEach((key, i) => {
    at[key] = [box.left + scale * (xa._offset + xa.l2p(nodes.x[i])), box.top + scale * (ya._offset + ya.l2p(nodes.y[i]))];
  });
  return {step: g.layout.meta.step, names: g.data.map(t => t.name), at,
          labels: labels ? Object.fromEntries(labels.customdata.map((k, i) => [k, labels.text[i]])) : {},
          notes: (g.layout.annotations || []).map(a => a.name === 'pinned' ? 'PINNED ' + a.text : '')};
}"""


def forward(page, step: int) -> dict:
    """Wait until the Forward pass figure shows `step`; what it shows."""
    page.wait_for_function(f"() => {{ const f = ({READ_FORWARD})(); return f && f.step === {step}; }}",
                           timeout=TIMEOUT_MS)
    return page.evaluate(READ_FORWARD)


def step_through(page, prompt: str | None, steps: int, name: str) -> tuple[dict, dict, int]:
    """Prefill (typing `prompt` unless None), then `steps` Next token clicks; a screenshot of each
    figure as `forward-<name>-prefill.png` and `-step<k>.png`. Returns the prefill's and the last
    step's figure, and the prompt's token count T."""
    if prompt is not None:
        page.locator("#prompt-box textarea").fill(prompt)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    tokens = int(re.search(r"(\d+) token\(s\) in", page.locator("#status").inner_text()).group(1))
    first = forward(page, 0)
    page.locator("#forward-plot").screenshot(path=str(ARTIFACTS / f"forward-{name}-prefill.png"))
    for k in range(1, steps + 1):
        page.locator("#decode-btn").click()
        expect(page.locator("#status")).to_contain_text(f"step {k}: 1 token(s) in", timeout=TIMEOUT_MS)
    last = forward(page, steps)
    page.locator("#forward-plot").screenshot(path=str(ARTIFACTS / f"forward-{name}-step{steps}.png"))
    return first, last, tokens


def presenter(page) -> None:
    """Switch presenter mode on from the settings (the sidebar), and close them again."""
    page.locator("body").click(position={"x": 640, "y": 8})  # focus outside the text fields
    page.keyboard.press("s")
    page.locator("#presenter-mode input").check()
    page.locator("body").click(position={"x": 1200, "y": 8})  # out of the checkbox, or the key is typed into it
    page.keyboard.press("s")
    page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().right <= 0")


def test_the_forward_pass_is_the_first_view_with_the_measured_shapes(open_app):
    page = open_app()
    assert page.get_by_role("tab", name="Forward pass").get_attribute("aria-selected") == "true"
    first, last, T = step_through(page, PROMPT, 3, "embedded")
    assert f"[1,{T},576]" in first["labels"]["layers.0.attn.q_proj"] and "step 3" not in first["names"]
    assert "step 3" in last["names"] and "[1,1,576]" in last["labels"]["layers.0.attn.q_proj"]
    assert f"[1,9,1,{T + 3}]" in last["labels"]["layers.0.attn.scores"]  # one row of n = T + 3 keys


def test_a_click_on_a_node_pins_its_explanation(open_app):
    page = open_app(1920, 1080)
    step_through(page, PROMPT, 1, "click")
    shown = forward(page, 1)
    x, y = shown["at"]["layers.0.attn.q_proj"]
    page.mouse.click(x, y)
    page.wait_for_function(f"() => ({READ_FORWARD})().notes.some(n => n.startsWith('PINNED'))")
    pinned = next(note for note in page.evaluate(READ_FORWARD)["notes"] if note.startswith("PINNED"))
    assert "layers.0.attn.q_proj" in pinned and "·" in pinned and "measured:" in pinned
    page.locator("#forward-plot").screenshot(path=str(ARTIFACTS / "forward-pinned.png"))
    page.mouse.click(x, y)  # the same node again: unpinned
    page.wait_for_function(f"() => !({READ_FORWARD})().notes.some(n => n.startsWith('PINNED'))")


def test_presenter_mode_draws_the_same_diagram_larger(open_app):
    page = open_app()
    presenter(page)
    _, last, _ = step_through(page, PROMPT, 3, "embedded-presenter")
    assert last["labels"] and "step 3" in last["names"]
    sizes = page.evaluate("() => [...document.querySelectorAll('#forward-plot .js-plotly-plot text')]"
                          ".map(t => parseFloat(getComputedStyle(t).fontSize)).filter(Boolean)")
    assert max(sizes) >= 20  # the title, 1.5 times larger
    page.locator("body").click(position={"x": 1200, "y": 8})
    page.keyboard.press("s")  # the settings open beside it: the diagram is drawn as wide, scaled to its place
    page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().left >= 0")
    page.wait_for_function("() => { const g = document.querySelector('#forward-plot .js-plotly-plot');"
                           "return g._fullLayout.width >= 1220 && g.getBoundingClientRect().right"
                           " <= g.closest('#forward-plot').getBoundingClientRect().right + 1; }")


@pytest.mark.parametrize("mode", ["normal", "presenter"])
def test_shape_only_qwen3_8b_draws_its_qk_norm_and_gqa(open_app, mode):
    page = open_app(1920, 1080)
    page.locator("body").click(position={"x": 960, "y": 8})
    page.keyboard.press("s")
    page.locator("#model-select input").click()
    page.get_by_role("option", name="shape-only: qwen3-8b").click()
    expect(page.locator("#prompt-tokens")).to_be_visible()
    page.locator("#prompt-tokens input").fill("1024")
    if mode == "presenter":
        page.locator("#presenter-mode input").check()
    page.keyboard.press("Escape")
    page.locator("body").click(position={"x": 960, "y": 8})
    page.keyboard.press("s")
    first, last, _ = step_through(page, None, 3, f"qwen3-8b-{mode}")
    assert "[1,1024,32,128]" in first["labels"]["layers.0.attn.q_norm"]  # QK-norm before the transpose
    assert "[1,8,1027,128]×2" in last["labels"]["layers.0.attn.kv_cache_write"]  # h_kv = 8 heads, n = 1027
