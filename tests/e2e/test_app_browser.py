"""The app in headless Chromium on the embedded model, driven as a person drives it.

Type a prompt, Prefill, three Next token clicks and one keyboard shortcut, then check each view;
switch layer, move the temperature, go back to step 1, and open a second page. Screenshots of
every view are saved under artifacts/e2e/.

The app is served once for the session (tests/e2e/conftest.py); every test opens its own freshly loaded page (its own session)
and runs the steps it needs itself (`prefill`, `next_tokens`, `run_tokens`), so each passes alone and in
any order. The browser and `new_page` come from tests/e2e/conftest.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

pytestmark = pytest.mark.real_model

TIMEOUT_MS = 60_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PROMPT = "What is the capital of France?"
STEP_PACE_S = 0.5  # the least time a step of the paced run of N tokens takes
GEMMS = {"attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
         "mlp.down_proj", "lm_head"}
TABS = {"journey": "Journey", "attention": "Attention", "kv_cache": "KV cache", "sampling": "Sampling",
        "roofline": "Roofline"}
PLOTS = {"journey": "journey-plot", "attention": "attention-plot", "kv_cache": "kv-plot",
         "sampling": "sampling-plot", "roofline": "roofline-plot"}
# What a test reads of a drawn figure: its meta marker, texts, and per trace the type, names and z rows
# (a z sent as a base64 typed array stays {dtype, bdata, shape} in the graph's data).
READ_FIGURE = """id => {
  const g = document.querySelector('#' + id + ' .js-plotly-plot');
  if (!g || !g.layout) return null;
  const rows = z => !z ? null : Array.isArray(z) ? z.length : Number(String(z.shape).split(',')[0]);
  const texts = [g.layout.title && g.layout.title.text, ...(g.layout.annotations || []).map(a => a.text)];
  return {meta: g.layout.meta, texts: texts.filter(Boolean).join(' | '),
          traces: g.data.map(t => ({type: t.type, name: t.name || '', rows: rows(t.z),
                                    labels: [].concat(t.text || [], t.customdata || [], t.hovertext || [])
                                      .map(String).join(' | ')}))};
}"""

SAMPLING_DRAWN = "() => document.querySelector('#sampling-plot .js-plotly-plot')?.layout?.meta?.step === 0"
SAMPLING_TEXTS = """() => { const l = document.querySelector('#sampling-plot .js-plotly-plot').layout;
  return [l.title.text, ...(l.annotations || []).map(a => a.text)].join(' | '); }"""

# Records the status line as the page takes a click on `selector` (in window.statusAtClick).
STATUS_AT_CLICK = """selector => document.addEventListener('click', event => {
  if (event.target.closest(selector)) window.statusAtClick = document.querySelector('#status').innerText;
}, true)"""


@pytest.fixture
def open_app(new_page, embedded_app_url):
    """`open_app(query="")`: a freshly loaded page of the app (`query` appended to its address)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return lambda query="": new_page(embedded_app_url + query, timeout_ms=TIMEOUT_MS)


@pytest.fixture
def page(open_app):
    """This test's own page of the app, before any prefill."""
    return open_app()


def open_settings(page) -> None:
    """Open the settings (the sidebar, closed at start: what is in it is off screen until then)."""
    page.locator("#settings .toggle-button").click()
    page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().left >= 0")


def show(page, view: str, step: int) -> dict:
    """Open a view's tab, wait until its figure shows `step`, and return what is drawn."""
    page.get_by_role("tab", name=TABS[view], exact=True).click()
    page.wait_for_function(
        """([id, step]) => { const g = document.querySelector('#' + id + ' .js-plotly-plot');
                             return g && g.layout && g.layout.meta && g.layout.meta.step === step; }""",
        arg=[PLOTS[view], step])
    return page.evaluate(READ_FIGURE, PLOTS[view])


def status(page) -> str:
    return page.locator("#status").inner_text()


def prefill(page, prompt: str | None = PROMPT) -> int:
    """Type `prompt` (None: keep the box's text), press Prefill and wait for its status line; returns
    the prompt's token count."""
    if prompt is not None:
        page.locator("#prompt-box textarea").fill(prompt)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
    return int(re.search(r"(\d+) token\(s\) in", status(page)).group(1))


def next_tokens(page, count: int) -> None:
    """Just after a prefill: click Next token `count` times, waiting each time for that step's status."""
    for k in range(1, count + 1):
        page.locator("#decode-btn").click()
        expect(page.locator("#status")).to_contain_text(f"step {k}: 1 token(s) in", timeout=TIMEOUT_MS)


def run_tokens(page, count: int) -> None:
    """Just after a prefill: Run N tokens with N = `count` (one event, quicker than `count` clicks), and
    wait until the run has ended on step `count` (its last step shows before its event ends)."""
    page.locator("#run-count input").fill(str(count))
    page.locator("#run-btn").click()
    expect(page.locator("#status")).to_contain_text(f"step {count}: 1 token(s) in", timeout=TIMEOUT_MS)
    expect(page.locator("#status [data-testid=status-tracker]")).to_be_hidden(timeout=TIMEOUT_MS)


def test_a_person_steps_through_prefill_and_four_decode_steps(page):
    T = prefill(page)
    next_tokens(page, 3)
    page.locator("body").click(position={"x": 5, "y": 5})  # focus outside the text fields
    page.keyboard.press("n")
    expect(page.locator("#status")).to_contain_text(f"step 4: 1 token(s) in, context n = {T + 4}")
    expect(page.locator("#token-strip .tok.prompt")).to_have_count(T)
    expect(page.locator("#token-strip .tok.generated")).to_have_count(4)

    journey = show(page, "journey", 4)
    journey_text = journey["texts"] + " ".join(t["labels"] for t in journey["traces"])
    assert f"[1, {T}, 576]" in journey_text and "[1, 1, 576]" in journey_text

    attention = show(page, "attention", 4)
    heatmaps = [t for t in attention["traces"] if t["type"] == "heatmap"]
    assert len(heatmaps) == 9 and all(h["rows"] == T + 4 for h in heatmaps)

    kv = show(page, "kv_cache", 4)
    assert f"[1, 3, {T + 4}, 64]" in kv["texts"]

    sampling = show(page, "sampling", 4)
    drawn = page.locator("#token-strip .tok.next .piece").inner_text()
    assert f"drawn '{drawn}'" in sampling["texts"]

    roofline = show(page, "roofline", 4)
    labels = " | ".join(t["labels"] for t in roofline["traces"])
    assert all(gemm in labels for gemm in GEMMS), labels
    for view in TABS:
        show(page, view, 4)
        page.screenshot(path=str(ARTIFACTS / f"{view}.png"), full_page=True)


def test_views_follow_the_controls_without_a_new_step(page):
    prefill(page)
    run_tokens(page, 4)
    before = status(page)
    show(page, "journey", 4)
    page.locator("#layer-slider input[type=number]").fill("5")
    page.locator("#layer-slider input[type=number]").press("Enter")
    page.wait_for_function("() => document.querySelector('#journey-plot .js-plotly-plot')"
                           ".layout.title.text.includes('layer 5')")
    show(page, "attention", 4)
    page.wait_for_function("() => document.querySelector('#attention-plot .js-plotly-plot')"
                           ".layout.title.text.includes('layer 5')")

    old_title = show(page, "sampling", 4)["texts"].split(" | ")[0]
    open_settings(page)
    page.get_by_text("Sampling: greedy or sample").click()
    redrawn = "old => document.querySelector('#sampling-plot .js-plotly-plot').layout.title.text !== old"
    for attempt in range(3):  # the box may not take the first keystrokes while the accordion opens
        page.locator("#temperature input[type=number]").fill("1.7")
        page.locator("#temperature input[type=number]").press("Enter")
        try:
            page.wait_for_function(redrawn, arg=old_title, timeout=15_000)
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    sampling = show(page, "sampling", 4)
    assert "temperature 1.7" in sampling["texts"] and status(page) == before  # redrawn, no new step

    page.locator("#step-select input").click()
    page.get_by_role("option", name="step 1", exact=True).click()
    for view in TABS:
        show(page, view, 1)
    page.screenshot(path=str(ARTIFACTS / "back_to_step_1.png"), full_page=True)


def test_a_second_page_has_its_own_session(page, open_app):
    prefill(page)
    run_tokens(page, 4)
    other = open_app()
    other.locator("#decode-btn").click()
    expect(other.get_by_test_id("toast-body").first).to_contain_text("Run the prefill first", timeout=TIMEOUT_MS)
    prefill(other, "Name a colour.")
    other.close()  # its page closes: only its own session is freed
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 5: 1 token(s) in")  # the first page's session lives on


def test_errors_are_messages_that_keep_the_view(page):
    prefill(page)
    run_tokens(page, 5)
    before = status(page)
    page.locator("#prompt-box textarea").fill("   ")
    page.locator("#prefill-btn").click()
    expect(page.get_by_test_id("toast-body").last).to_contain_text("The prompt is empty", timeout=TIMEOUT_MS)
    assert before in status(page)  # the status line gains an "Error" mark and keeps its text
    expect(page.locator("#token-strip .tok.generated")).to_have_count(5)


def test_presenter_mode_enlarges_the_page_and_the_figures(page):
    prefill(page)
    run_tokens(page, 5)
    open_settings(page)
    page.locator("#presenter-mode input").check()
    page.wait_for_function("() => document.body.classList.contains('presenter')")
    show(page, "journey", 5)
    page.wait_for_function("() => document.querySelector('#journey-plot .js-plotly-plot').layout.font.size === 20")
    page.screenshot(path=str(ARTIFACTS / "presenter.png"), full_page=True)
    page.locator("#presenter-mode input").uncheck()
    page.wait_for_function("() => document.querySelector('#journey-plot .js-plotly-plot').layout.font.size === 13")


def test_the_view_on_screen_saves_as_svg(page, tmp_path):
    prefill(page)
    run_tokens(page, 5)
    show(page, "kv_cache", 5)
    open_settings(page)
    page.locator("#lecture-tools").get_by_text("Share a link").click()
    with page.expect_download() as download:
        page.locator("#svg-btn").click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    assert path.name == "explorer-kv_cache-step-5.svg"
    assert path.read_text(encoding="utf-8").startswith("<svg") and "KV cache after step 5" in path.read_text()


def test_a_shared_link_fills_the_prompt_and_the_settings(open_app):
    page = open_app("?prompt=Bonjour+%C3%A0+tous&temperature=1.3&seed=9&sample=0")
    expect(page.locator("#prompt-box textarea")).to_have_value("Bonjour à tous", timeout=TIMEOUT_MS)
    open_settings(page)
    page.get_by_text("Sampling: greedy or sample").click()
    expect(page.locator("#temperature input[type=number]")).to_have_value("1.3")
    expect(page.locator("#seed input")).to_have_value("9")
    expect(page.locator("#do-sample input")).not_to_be_checked()
    page.locator("#lecture-tools").get_by_text("Share a link").click()
    page.locator("#share-btn").click()
    expect(page.locator("#share-link textarea")).to_have_value(re.compile(r"^http://127\.0\.0\.1:\d+/\?prompt="
                                                                          r"Bonjour\+%C3%A0\+tous&.*temperature=1\.3"))


def test_a_prefill_clicked_as_soon_as_a_links_page_allows_runs_with_the_links_settings(browser, embedded_app_url,
                                                                                         monkeypatch):
    from explorer.ui.handlers import served

    read = served.values_from_query
    monkeypatch.setattr(served, "values_from_query", lambda params: (time.sleep(3), read(params))[1])  # a slow load
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto(embedded_app_url + "?prompt=Once+upon+a+time&sample=1&temperature=1.5&top_k=40&seed=4")
        page.locator("#prefill-btn").click(timeout=TIMEOUT_MS)  # waits only until the button is enabled
        expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
        page.get_by_role("tab", name="Sampling", exact=True).click()
        page.wait_for_function(SAMPLING_DRAWN, timeout=TIMEOUT_MS)
        assert "temperature 1.5 → top-k 40" in page.evaluate(SAMPLING_TEXTS)
    finally:
        context.close()


def test_a_new_prefill_stops_a_run_of_n_tokens(page, monkeypatch):
    from explorer.runner.session import InferenceSession

    decode_step = InferenceSession.decode_step

    def paced_decode_step(self, *args, **kwargs):
        # kept: the point, steps no faster than the page draws them; at full speed the page here falls
        # behind and takes the Prefill click only once all 60 steps are drawn
        time.sleep(STEP_PACE_S)
        return decode_step(self, *args, **kwargs)

    monkeypatch.setattr(InferenceSession, "decode_step", paced_decode_step)
    prefill(page, "Write a long story about a dragon who learns to bake bread.")
    page.evaluate(STATUS_AT_CLICK, "#prefill-btn")
    page.locator("#run-count input").fill("60")
    page.locator("#run-btn").click()
    expect(page.locator("#status")).to_contain_text(re.compile(r"step \d+: "))  # the run is under way
    page.locator("#prompt-box textarea").fill("Name a colour.")
    page.locator("#prefill-btn").click()
    landed = page.evaluate("window.statusAtClick")
    assert re.search(r"step \d+: ", landed) and "step 60:" not in landed  # Prefill was pressed mid-run
    expect(page.locator("#status")).to_contain_text("prefill:", timeout=3_000)  # not after the 60 steps
    page.wait_for_timeout(2_000)  # kept: the point is that no step arrives later, an absence nothing signals
    assert "prefill:" in status(page)  # the run sends no more steps


def test_a_number_typed_out_of_range_is_set_to_the_nearest_end_without_an_error(page):
    prefill(page, None)  # the prompt box's default text
    page.get_by_role("tab", name="Sampling", exact=True).click()
    open_settings(page)
    page.get_by_text("Sampling: greedy or sample").click()
    page.locator("#do-sample input").check()
    for selector, typed, shown in [("#top-p input[type=number]", "5", "1"), ("#temperature input[type=number]", "-1", "0.05"),
                                   ("#run-count input", "10000", "256"), ("#temperature input[type=number]", "0.7", "0.7"),
                                   ("#layer-slider input[type=number]", "77", "29"),
                                   ("#temperature input[type=number]", "0.01", "0.05")]:
        box = page.locator(selector)
        box.click()
        box.press("Control+a")
        box.press_sequentially(typed, delay=150)  # slowly: each keystroke's value reaches Gradio
        box.press("Enter")
        expect(box).to_have_value(shown)
    expect(page.locator("#sampling-plot")).to_contain_text("temperature 0.05")  # the value shown is the one used
    assert page.get_by_test_id("toast-body").count() == 0  # Gradio was never sent a value out of range
