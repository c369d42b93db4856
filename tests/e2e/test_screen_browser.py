"""The page on one screen, in headless Chromium on the embedded model: after Prefill and a step the
figure of every view and experiment is whole on screen with the prompt and the step buttons (1280x720
and 1920x1080, presenter mode too), presenter mode enlarges the whole page, the settings leave every tab
name in the row, the token strip says when the prompt's start is above it, the page keeps its light
theme with readable text when the system or the address asks for dark (and offers no dark switch), the
full-screen button fills the screen
with the figure, a zoom survives the next step, and a long prompt leaves the figure and the token just
chosen in sight.

Each test opens its own page and runs its own Prefill. Screenshots go to artifacts/e2e/screen-*.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

pytestmark = pytest.mark.real_model

TIMEOUT_MS = 60_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PROMPT = "What is the capital of France?"
SCREENS = {"1280x720": (1280, 720), "1920x1080": (1920, 1080)}
MIN_FIGURE_PX = 360  # every figure's least height on screen, whole
EXPERIMENT_TABS = {"Equivalent ≠ identical": "equivalence", "Lab": "lab"}  # figures drawn for no step
MIN_CONTRAST = 4.5  # WCAG AA for text
# the prompt, the step buttons and the run count: on screen with the figure
STEP_CONTROLS = ("#prompt-box textarea", "#prefill-btn", "#decode-btn", "#run-count input", "#run-btn", "#reset-btn")

# The figure of the selected tab: its view and step (layout.meta) and where it is on the screen.
SHOWN_FIGURE = """() => {
  const g = [...document.querySelectorAll('#views .js-plotly-plot')].find(e => e.offsetParent !== null);
  if (!g || !g.layout || !g.layout.meta) return null;
  const r = g.getBoundingClientRect();
  return {view: g.layout.meta.view, step: g.layout.meta.step, top: r.top, bottom: r.bottom, height: r.height,
          scrollY: window.scrollY, innerHeight: window.innerHeight};
}"""
# The figure of the selected tab: its plot's and its main svg's boxes on screen.
FIGURE_BOXES = """() => {
  const g = [...document.querySelectorAll('#views .js-plotly-plot')].find(e => e.offsetParent !== null);
  const box = e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  return {view: g.layout.meta.view, step: g.layout.meta.step, plot: box(g), svg: box(g.querySelector('svg.main-svg')),
          scrollY: window.scrollY};
}"""
# the figure on screen drawn at the width its fit asks (assets/shortcuts.js) and inside the window
FITTED = """() => { const g = [...document.querySelectorAll('#views .js-plotly-plot')].find(e => e.offsetParent !== null);
  if (!g || !g._fullLayout || !g.style.transform || Math.abs(g._fullLayout.width - parseFloat(g.style.width)) > 1) return false;
  const r = g.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }"""
SETTLE_MS = 2_000  # a step's status line and token strip grow just after its figure is drawn: the fit follows
RECT = "e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }"
# WCAG contrast of an element's text: its colour (with the opacity of it and its ancestors) over the
# background it is drawn on (the first opaque background up the tree, translucent ones blended on it).
CONTRAST = """e => {
  const rgba = c => {
    const m = c.match(/rgba?\\(([^)]+)\\)/) || c.match(/color\\(srgb ([^)]+)\\)/);
    if (!m) throw new Error('unread colour ' + c);
    const parts = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    const scale = c.startsWith('color(') ? 255 : 1;
    return [parts[0] * scale, parts[1] * scale, parts[2] * scale, parts.length > 3 ? parts[3] : 1];
  };
  const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat(1);
  const layers = [];
  for (let node = e; node; node = node.parentElement) {
    const bg = rgba(getComputedStyle(node).backgroundColor);
    if (bg[3] > 0) layers.push(bg);
    if (bg[3] >= 1) break;
  }
  let background = [255, 255, 255, 1];  // the canvas under a page with no opaque background
  for (const layer of layers.reverse()) background = over(layer, background);
  let opacity = 1;
  for (let node = e; node && node !== document.body; node = node.parentElement) opacity *= Number(getComputedStyle(node).opacity);
  const text = rgba(getComputedStyle(e).color);
  const shown = over([text[0], text[1], text[2], text[3] * opacity], background);
  const luminance = c => {
    const [r, g, b] = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [hi, lo] = [luminance(shown), luminance(background)].sort((a, b) => b - a);
  return {contrast: (hi + 0.05) / (lo + 0.05), text: getComputedStyle(e).color, background: background.slice(0, 3)};
}"""


def prefill(page) -> None:
    page.locator("#prompt-box textarea").fill(PROMPT)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)


def shown_figure(page, step: int) -> dict:
    """Wait until the figure on screen shows `step`; where it is."""
    page.wait_for_function(f"() => {{ const f = ({SHOWN_FIGURE})(); return f && f.step === {step}; }}")
    return page.evaluate(SHOWN_FIGURE)


def shown_view(page, view: str) -> dict:
    """Wait until the figure on screen is `view`'s (one drawn for no step); where it is."""
    page.wait_for_function(f"() => {{ const f = ({SHOWN_FIGURE})(); return f && f.view === '{view}'; }}")
    return page.evaluate(SHOWN_FIGURE)


def settled(page) -> None:
    """Wait until the figure on screen is fitted to the room below the band and inside the window, for at
    most SETTLE_MS (the assertions that follow say what is wrong if it is not)."""
    try:
        page.wait_for_function(FITTED, timeout=SETTLE_MS)
    except PlaywrightTimeoutError:
        pass


def assert_wholly_on_screen(page, selector: str) -> None:
    box = page.locator(selector).first.evaluate(RECT)
    size = page.viewport_size
    assert 0 <= box["top"] and box["bottom"] <= size["height"] and 0 <= box["left"] and box["right"] <= size["width"], \
        (selector, box, size)


def open_settings(page) -> None:
    """Open the sidebar (the settings) and wait until it has slid in."""
    page.locator("#settings .toggle-button").click()
    page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().left >= 0")
    page.wait_for_timeout(400)  # kept: the slide's transition (0.3 s) has no event to wait on


def test_the_sidebar_holds_the_settings_and_opens_by_key(open_app):
    page = open_app(1280, 720)
    for selector in ("#model-select", "#custom-model", "#system-prompt", "#chat-template", "#sampling-settings",
                     "#lecture-tools", "#hardware-select", "#attention-zoom", "#average-heads", "#presenter-mode",
                     "#shortcuts"):
        assert page.locator(f"#settings {selector}").count() == 1, selector
    assert page.locator("#settings").evaluate(RECT)["right"] <= 0  # closed: the page is the figure's
    page.locator("body").click(position={"x": 640, "y": 8})  # focus outside the text fields
    page.keyboard.press("s")
    page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().left >= 0")
    page.wait_for_timeout(400)  # kept: the slide's transition
    assert_wholly_on_screen(page, "#model-select")
    # every tab name (the Lab's too) in the one row of the tab bar, none under the full-screen button
    tabs = page.locator("#views [role='tab']").evaluate_all(f"tabs => tabs.map({RECT})")
    button = page.locator("#forward-plot .custom-button").evaluate(RECT)
    assert len(tabs) == 9 and all(abs(tab["top"] - tabs[0]["top"]) < 2 for tab in tabs), tabs
    assert tabs[-1]["right"] <= button["left"] and page.locator("#views .overflow-dropdown:not(.hide)").count() == 0, (tabs, button)
    page.screenshot(path=str(ARTIFACTS / "screen-1280x720-settings.png"))
    page.keyboard.press("s")
    page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().right <= 0")


def figures_on_screen(page, screen: str, step: int, shots: str | None) -> list[dict]:
    """Select each tab in turn; assert its figure (the plot and its main svg) is whole inside the window
    without scrolling, at least MIN_FIGURE_PX tall, with the step controls on screen; a screenshot of each
    tab if `shots` names them. The views' figures show `step`, the experiments' their own."""
    tabs, measured = page.locator("#views [role='tab']"), []
    size = page.viewport_size
    for index in range(tabs.count()):
        tab = tabs.nth(index)
        tab.click()
        experiment = EXPERIMENT_TABS.get(tab.inner_text().strip())
        (shown_view(page, experiment) if experiment else shown_figure(page, step))
        settled(page)
        figure = page.evaluate(FIGURE_BOXES)
        measured.append(figure)
        for box in (figure["plot"], figure["svg"]):
            assert 0 <= box["top"] and box["bottom"] <= size["height"] and 0 <= box["left"] \
                and box["right"] <= size["width"], (screen, figure)
            assert box["bottom"] - box["top"] >= MIN_FIGURE_PX, (screen, figure)
        assert figure["scrollY"] == 0, figure
        for selector in STEP_CONTROLS:
            assert_wholly_on_screen(page, selector)
        if shots:
            page.screenshot(path=str(ARTIFACTS / f"{shots}-{index + 1}-{experiment or figure['view']}.png"))
    return measured


@pytest.mark.parametrize(("screen", "presenter"), [("1280x720", False), ("1280x720", True), ("1920x1080", False),
                                                   ("1920x1080", True)], ids=["1280x720", "1280x720-presenter",
                                                                              "1920x1080", "1920x1080-presenter"])
def test_every_figure_is_whole_on_screen_after_prefill_and_a_step(open_app, screen, presenter):
    """Figures first: each view's figure and the experiments' are whole in the window, at least 360 px
    tall, with the prompt and the step buttons, after Prefill and after Next token; a lab experiment's
    figure and its text too (one page for all the tabs)."""
    width, height = SCREENS[screen]
    page = open_app(width, height)
    name = f"screen-{screen}" + ("-presenter" if presenter else "")
    if presenter:
        open_settings(page)
        page.locator("#presenter-mode input").check()
        page.wait_for_function("() => document.body.classList.contains('presenter')")
        page.locator("#settings .toggle-button").click()
        page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().right <= 0")
    prefill(page)
    assert shown_figure(page, 0)["view"] == "forward"  # the first tab, shown after Prefill
    measured = {"prefill": figures_on_screen(page, screen, 0, name)}
    page.get_by_role("tab", name="Forward pass", exact=True).click()
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
    measured["step 1"] = figures_on_screen(page, screen, 1, None)
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(measured, indent=1))
    if presenter or screen != "1280x720":
        return
    # a lab experiment (the menu's first): its figure whole, its text beside it and on screen
    page.get_by_role("tab", name="Lab", exact=True).click()
    page.locator("#lab-btn").click()
    page.wait_for_function("() => (document.querySelector('#lab-plot .js-plotly-plot')?.layout?.meta?.view || '')"
                           ".startsWith('lab-')", timeout=3 * TIMEOUT_MS)
    settled(page)
    figure = page.evaluate(FIGURE_BOXES)
    assert figure["plot"]["top"] >= 0 and figure["plot"]["bottom"] <= height, figure
    assert figure["plot"]["bottom"] - figure["plot"]["top"] >= MIN_FIGURE_PX, figure
    text = page.locator("#lab-controls").evaluate(RECT)
    assert text["left"] >= figure["plot"]["right"] - 1 and text["bottom"] <= height, (figure, text)
    page.screenshot(path=str(ARTIFACTS / f"{name}-lab-experiment.png"))


def test_a_long_prompt_keeps_the_figure_and_the_chosen_token_in_sight(open_app):
    """At 1280x720 a prompt of many lines scrolls inside its box (the figure stays whole on screen), and
    after each step the token strip, rows of chips taller than it shows, is scrolled to the token
    just chosen."""
    page = open_app(1280, 720)
    # past MAX_CHIPS tokens: each step changes the strip's chips in place rather than adding one
    page.locator("#prompt-box textarea").fill("\n".join(f"Night {i}: the keeper counted {i * 7} ships and {i % 5} storms."
                                                      for i in range(40)))
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    figure = shown_figure(page, 0)
    assert 0 <= figure["top"] and figure["bottom"] <= 720 and figure["height"] >= MIN_FIGURE_PX, figure
    strip = page.locator("#token-strip .token-strip")
    assert strip.evaluate("e => e.scrollHeight > 2 * e.clientHeight")  # rows out of sight, above
    for step in range(1, 5):
        page.locator("#decode-btn").click()
        expect(page.locator("#status")).to_contain_text(f"step {step}:", timeout=TIMEOUT_MS)
        page.wait_for_function("""() => { const box = document.querySelector('#token-strip .token-strip');
          const chip = box.querySelector('.tok.next'), outer = box.getBoundingClientRect();
          const inner = chip.getBoundingClientRect();
          return inner.top >= outer.top && inner.bottom <= outer.bottom; }""")
    page.screenshot(path=str(ARTIFACTS / "screen-1280x720-long-prompt.png"))


def test_the_token_strip_says_when_the_prompts_start_is_scrolled_above(open_app):
    """After Prefill the strip is scrolled to the token chosen; the legend under it then counts the
    tokens above its top, until the strip is scrolled back to the prompt's start."""
    page = open_app(1280, 720)
    prefill(page)
    strip, hint = page.locator("#token-strip"), "e => getComputedStyle(e, '::after').content"
    page.wait_for_function("() => Number(document.querySelector('#token-strip').dataset.above) > 0")
    box = page.locator("#token-strip .token-strip")
    above = box.evaluate("e => [...e.children].filter(c => c.getBoundingClientRect().bottom <= "
                         "e.getBoundingClientRect().top + 1).length")
    assert above > 0 and strip.get_attribute("data-above") == str(above)
    assert "earlier tokens above: scroll the strip" in page.locator("#token-strip .legend").evaluate(hint)
    page.screenshot(path=str(ARTIFACTS / "screen-1280x720-strip-hint.png"))
    box.evaluate("e => { e.scrollTop = 0; }")
    page.wait_for_function("() => document.querySelector('#token-strip').dataset.above === '0'")
    assert page.locator("#token-strip .legend").evaluate(hint) == "none"


def font_sizes(page) -> dict[str, float]:
    selectors = {"button": "#prefill-btn", "tab": "#views [role='tab']", "chip": "#token-strip .tok .piece",
                 "status": "#status", "prompt": "#prompt-box textarea", "label": "#prompt-box [data-testid='block-info']",
                 "step menu": "#step-select input", "title": "#title"}
    return {name: page.locator(selector).first.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
            for name, selector in selectors.items()}


@pytest.mark.parametrize("screen", SCREENS)
def test_presenter_mode_enlarges_the_whole_page_and_keeps_the_figure_on_screen(open_app, screen):
    width, height = SCREENS[screen]
    page = open_app(width, height)
    prefill(page)
    shown_figure(page, 0)
    before = font_sizes(page)
    open_settings(page)
    page.locator("#presenter-mode input").check()
    page.wait_for_function("() => document.body.classList.contains('presenter')")
    page.locator("#settings .toggle-button").click()
    page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().right <= 0")
    after = font_sizes(page)
    assert all(after[name] >= 1.25 * before[name] for name in before), (before, after)
    assert after["chip"] >= 20 and after["button"] >= 20 and after["tab"] >= 20, after
    # by keyboard alone: N steps, 1-6 switch views (the focus outside the text fields)
    page.locator("body").click(position={"x": width // 2, "y": 4})
    page.keyboard.press("n")
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
    page.keyboard.press("3")
    expect(page.get_by_role("tab", name="Attention", exact=True)).to_have_attribute("aria-selected", "true")
    page.keyboard.press("1")
    figure = shown_figure(page, 1)
    assert figure["view"] == "forward"
    page.wait_for_function("() => document.querySelector('#forward-plot .js-plotly-plot').layout.font.size >= 18")
    for selector in STEP_CONTROLS:
        assert_wholly_on_screen(page, selector)
    figure = page.evaluate(SHOWN_FIGURE)
    (ARTIFACTS / f"screen-{screen}-presenter.json").write_text(json.dumps({"figure": figure, "font_px": [before, after]}))
    assert figure["scrollY"] == 0 and figure["top"] <= height - 120, figure  # its top (title) on screen
    page.screenshot(path=str(ARTIFACTS / f"screen-{screen}-presenter.png"))


@pytest.mark.parametrize("dark", ["query", "system"])
def test_the_page_keeps_its_light_theme_with_readable_text_when_dark_is_asked(open_app, dark):
    if dark == "query":
        page = open_app(1280, 720, "?__theme=dark")
    else:
        page = open_app(1280, 720, color_scheme="dark")
        assert page.evaluate("() => matchMedia('(prefers-color-scheme: dark)').matches")
    prefill(page)
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
    shown_figure(page, 1)
    assert not page.evaluate("() => document.body.classList.contains('dark')")
    # and no switch to a dark theme is offered (Gradio's settings in the footer are not linked)
    expect(page.locator("footer")).to_contain_text("Built with Gradio")
    assert "Settings" not in page.locator("footer").inner_text() and page.get_by_text("Dark", exact=True).count() == 0
    if dark == "system":  # the system's scheme changes while the page is open: still light
        page.emulate_media(color_scheme="light")
        page.emulate_media(color_scheme="dark")
        page.wait_for_timeout(200)  # kept: Gradio's listener runs on the change; nothing signals it
        assert not page.evaluate("() => document.body.classList.contains('dark')")
    # Gradio fades an output while an event that updates it runs (the status line's follow-ups): settled first
    page.wait_for_function("""() => { let o = 1; for (let e = document.querySelector('#status p'); e; e = e.parentElement)
                                        o *= Number(getComputedStyle(e).opacity); return o === 1; }""")
    checked = {}
    for selector in ("#status p", "#token-strip .tok.prompt .piece", "#token-strip .tok.prompt sub",
                     "#token-strip .tok.generated .piece", "#token-strip .tok.generated sub",
                     "#token-strip .tok.next .piece", "#token-strip .tok.next sub", "#title p",
                     "#prompt-box textarea", "#prompt-box [data-testid='block-info']", "#prefill-btn", "#decode-btn",
                     "#reset-btn", "#run-btn", "#views [role='tab'][aria-selected='true']",
                     "#views [role='tab'][aria-selected='false']", "#layer-slider [data-testid='block-info']",
                     "#model-select .info-text", "#shortcuts p"):
        checked[selector] = page.locator(selector).first.evaluate(CONTRAST)
    (ARTIFACTS / f"screen-contrast-{dark}.json").write_text(json.dumps(checked, indent=1))
    low = {selector: found for selector, found in checked.items() if found["contrast"] < MIN_CONTRAST}
    assert not low, low
    page.screenshot(path=str(ARTIFACTS / f"screen-1280x720-dark-{dark}.png"))


def test_the_full_screen_button_fills_the_screen_with_the_views_through_a_step(open_app):
    page = open_app(1280, 720)
    prefill(page)
    page.get_by_role("tab", name="KV cache", exact=True).click()
    own_height = shown_figure(page, 0)["height"]
    page.locator("#kv-plot").get_by_role("button", name="Full screen").click()
    page.wait_for_function("() => document.fullscreenElement && document.fullscreenElement.id === 'views'")
    fitted = "() => { const f = document.querySelector('#kv-plot .js-plotly-plot').getBoundingClientRect(); " \
             "return f.bottom <= innerHeight && f.bottom >= innerHeight - 40; }"
    page.wait_for_function(fitted)  # the figure fills the screen's height
    page.keyboard.press("n")  # a step drawn in full screen keeps the screen's height
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
    page.wait_for_function("() => document.querySelector('#kv-plot .js-plotly-plot').layout.meta.step === 1")
    page.wait_for_function(fitted)
    page.screenshot(path=str(ARTIFACTS / "screen-1280x720-fullscreen.png"))
    page.keyboard.press("f")  # F again (or Esc) ends it; the figure has its own height back
    page.wait_for_function("() => !document.fullscreenElement")
    page.wait_for_function("h => Math.abs(document.querySelector('#kv-plot .js-plotly-plot')"
                           ".getBoundingClientRect().height - h) < 2", arg=own_height)


def test_full_screen_scales_a_tall_presenter_diagram_whole_keeping_its_layout(open_app):
    """A presenter-mode diagram is taller than the screen: it is drawn at its own height (its labels
    laid out for it, not squeezed into each other) and scaled to the page, then to the full screen."""
    page = open_app(1280, 720)
    prefill(page)
    page.locator("#settings .toggle-button").click()
    page.locator("#presenter-mode input").check()
    page.locator("#settings .toggle-button").click()
    plot = "document.querySelector('#forward-plot .js-plotly-plot')"
    page.wait_for_function(f"() => {plot}.layout.font.size >= 18")  # redrawn in presenter style
    own = page.evaluate(f"() => Number({plot}.dataset.ownHeight)")
    assert own > 720
    whole = f"""() => {{ const g = {plot}, r = g.getBoundingClientRect();
      return g._fullLayout.height === {own} && r.top >= 0 && r.bottom <= innerHeight && r.bottom >= innerHeight - 40; }}"""
    page.wait_for_function(whole)
    page.locator("#forward-plot").get_by_role("button", name="Full screen").click()
    page.wait_for_function("() => document.fullscreenElement && document.fullscreenElement.id === 'views'")
    page.wait_for_function(whole)
    page.screenshot(path=str(ARTIFACTS / "screen-1280x720-presenter-fullscreen.png"))


def test_a_step_draws_its_figure_once_and_frees_the_element_it_replaces(open_app):
    """Gradio's Plot draws each new figure into the element it is about to drop, then into a new one:
    assets/shortcuts.js lets only the new one draw, and frees the old one (Plotly.purge); an element
    that stays on the page is still redrawn."""
    page = open_app(1280, 720)
    prefill(page)
    shown_figure(page, 0)
    settled(page)  # its refit to the grown band (a relayout) is before the step, not counted
    plot = "#forward-plot .js-plotly-plot"
    page.locator(plot).evaluate("g => { window.oldPlot = g; window.oldDraws = 0; "
                                "g.on('plotly_afterplot', () => window.oldDraws++); }")
    page.locator("#decode-btn").click()
    shown_figure(page, 1)
    page.wait_for_function("() => !window.oldPlot.isConnected && window.oldPlot._fullLayout === undefined",
                           timeout=10_000)
    assert page.evaluate("() => window.oldDraws") == 0
    assert page.locator(plot).count() == 1
    page.locator(plot).evaluate("g => window.Plotly.react(g, g.data, {...g.layout, meta: {view: 'forward', step: 99}})")
    page.wait_for_function(f"() => document.querySelector('{plot}')._fullLayout.meta.step === 99", timeout=5_000)


def test_a_zoom_is_kept_when_the_next_step_redraws_the_figure(open_app):
    """Gradio draws each new figure in a new element, so the zoom is carried over by assets/shortcuts.js
    (keyed on the figure's layout.uirevision), not by Plotly.react alone."""
    page = open_app(1280, 720)
    prefill(page)
    page.get_by_role("tab", name="KV cache", exact=True).click()
    shown_figure(page, 0)
    plot = "#kv-plot .js-plotly-plot"
    assert page.locator(plot).evaluate("g => g.layout.uirevision !== undefined && g.layout.uirevision !== null"), \
        "the figure has no layout.uirevision: nothing says the next figure is the same one"
    # a person's drag across the totals over the steps (the second subplot): a zoom on its x axis
    box = page.locator(f"{plot} .nsewdrag[data-subplot='x2y2']").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + 0.25 * box["width"], y)
    page.mouse.down()
    page.mouse.move(box["x"] + 0.45 * box["width"], y + 2, steps=8)
    page.mouse.move(box["x"] + 0.6 * box["width"], y + 3, steps=8)
    page.mouse.up()
    zoomed = page.locator(plot).evaluate("g => g._fullLayout.xaxis2.range.slice()")
    assert zoomed[1] - zoomed[0] < 0.6 * 30, zoomed  # 30 layers: about a third shown
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
    page.wait_for_function(f"() => document.querySelector('{plot}').layout.meta.step === 1")
    kept = """([selector, zoomed]) => { const r = document.querySelector(selector)._fullLayout.xaxis2.range;
                                     return Math.abs(r[0] - zoomed[0]) < 1e-6 && Math.abs(r[1] - zoomed[1]) < 1e-6; }"""
    page.wait_for_function(kept, arg=[plot, zoomed], timeout=5_000)
    # another layer is another figure (another uirevision): its own ranges
    revision = page.locator(plot).evaluate("g => g.layout.uirevision")
    page.locator("#layer-slider input[type=number]").fill("3")
    page.locator("#layer-slider input[type=number]").press("Enter")
    page.wait_for_function(f"r => document.querySelector('{plot}').layout.uirevision !== r", arg=revision)
    page.wait_for_timeout(300)  # kept: a zoom set again would come right after the redraw; nothing signals its absence
    assert page.locator(plot).evaluate("g => g._fullLayout.xaxis2.autorange") is True


# each menu's value against its arrow: the text's right edge (the input's own font, measured on a canvas)
MENU_TEXT = """(selector) => [...document.querySelectorAll(selector)].map((block) => {
  const input = block.querySelector('input'), arrow = block.querySelector('.icon-wrap');
  const style = getComputedStyle(input), canvas = document.createElement('canvas').getContext('2d');
  canvas.font = style.font;
  const left = input.getBoundingClientRect().left + parseFloat(style.paddingLeft);
  return {id: block.id, value: input.value, text_right: left + canvas.measureText(input.value).width,
          arrow_left: arrow ? arrow.getBoundingClientRect().left : Infinity};
})"""


def test_every_menu_reads_whole_beside_its_arrow_with_the_settings_open(open_app):
    from playwright.sync_api import expect

    page = open_app(1280, 720)
    page.locator("#prompt-box textarea").fill("Hi")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:")
    open_settings(page)
    page.locator("#what-if").scroll_into_view_if_needed()
    ids = ["step-select", *(f"what-if-{name}" for name in ("batch", "context", "tokens", "tp", "weights",
                                                            "activations", "kv", "link"))]
    menus = page.evaluate(MENU_TEXT, ", ".join(f"#{id_}" for id_ in ids))
    assert sorted(menu["id"] for menu in menus) == sorted(ids), menus
    for menu in menus:  # "prefill", "as run", "nvlink4": none under its arrow
        assert menu["value"] and menu["text_right"] <= menu["arrow_left"], menu
