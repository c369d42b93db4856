"""Hostile saved runs loaded in headless Chromium through "Load a saved run", the way a person opens a
shared file: no script runs (`window.alert` is hooked before the page loads), nothing is fetched from any
host but the app's, and the page shows the file's text as plain text. A file that cannot be shown leaves
the page's live session as it was.

The app runs in-process on the tiny Llama (no download, no embedded model). Every hostile file is a real
run of that model (written by `save_run`) changed only where it attacks. Each test starts from its own
page; the browser comes from tests/e2e/conftest.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from served_app import serving
from tiny_models import tiny_model

from explorer.config import SamplingSettings
from explorer.runner.session import InferenceSession
from explorer.saved import save_run
from explorer.ui.hosting import LOCAL

TIMEOUT_MS = 30_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
SCRIPT_ID = '"><img src=x onerror=alert(1)>'  # closes the token chip's title attribute, then runs a script
OUTSIDE_PIXEL = "http://example.com/pixel.png"
DESCRIPTION = (f'<img src="{OUTSIDE_PIXEL}"> ![pixel]({OUTSIDE_PIXEL}) [a link](http://example.com) '
               '**bold** <script>alert(2)</script>')
PIECE = "<img src=x onerror=alert(3)>"
STOP_LINK = '<a href="http://example.com">q</a>'
# Before any of the page's scripts: every alert is recorded instead of shown.
HOOK_ALERT = "window.__alerts = []; window.alert = message => { window.__alerts.push(String(message)); };"


@pytest.fixture(scope="module")
def app_url():
    with serving(tiny_model("llama"), LOCAL) as (url, _):
        yield url


@pytest.fixture(scope="module")
def run_file(tmp_path_factory) -> dict:
    """A real run of the tiny Llama, parsed: the prefill of 11 tokens and two sampled decode steps."""
    settings = SamplingSettings(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, seed=3)
    session = InferenceSession(tiny_model("llama"), settings)
    session.prefill("Hello there", use_chat_template=False)
    for _ in range(2):
        session.decode_step()
    path = save_run(session.run, session.attention, tmp_path_factory.mktemp("runs") / "run.json")
    return json.loads(path.read_text(encoding="utf-8"))


class Watched:
    """A fresh page with `alert` hooked, recording every dialog and every request to another host."""

    def __init__(self, browser, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(TIMEOUT_MS)
        self.outside: list[str] = []
        self.dialogs: list[str] = []
        self.page.add_init_script(HOOK_ALERT)
        self.page.on("request", self._request)
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.page.goto(url)

    def _request(self, request) -> None:
        address = urlparse(request.url)
        if address.scheme in ("http", "https", "ws", "wss") and address.hostname != "127.0.0.1":
            self.outside.append(request.url)

    def upload(self, path) -> None:
        self.page.locator("#settings .toggle-button").click()  # the settings (a sidebar) hold it
        self.page.locator("#lecture-tools").get_by_text("Share a link").click()
        self.page.locator("#import-file input[type=file]").set_input_files(str(path))

    def assert_nothing_ran_or_fetched(self) -> None:
        # kept: an injected image's onerror fires once its request fails, and a script that never runs
        # signals nothing to wait for
        self.page.wait_for_timeout(1_000)
        assert self.page.evaluate("window.__alerts") == [] and self.dialogs == []
        assert self.outside == []


@pytest.fixture
def watched(browser, app_url):
    watched = Watched(browser, app_url)
    yield watched
    watched.page.close()


def tampered(run_file: dict, tmp_path, change) -> str:
    """The real run changed by `change(run)`, written to a file; returns its path."""
    run = copy.deepcopy(run_file)
    change(run)
    path = tmp_path / "shared-run.json"
    path.write_text(json.dumps(run), encoding="utf-8")
    return str(path)


def test_a_script_in_a_token_id_is_refused_and_never_runs(watched, run_file, tmp_path):
    from playwright.sync_api import expect

    path = tampered(run_file, tmp_path, lambda run: run["traces"][0]["input_ids"].__setitem__(0, SCRIPT_ID))
    watched.upload(path)
    watched.page.wait_for_selector("[data-testid=toast-body], #token-strip .tok")  # refused, or drawn
    watched.assert_nothing_ran_or_fetched()
    expect(watched.page.get_by_test_id("toast-body").last).to_contain_text(
        "traces[0].input_ids[0] must be a token id, not text")
    expect(watched.page.locator("#token-strip .tok")).to_have_count(0)


def test_html_in_a_run_shows_as_plain_text_and_fetches_nothing(watched, run_file, tmp_path):
    from playwright.sync_api import expect

    def attack(run):
        run["description"] = DESCRIPTION
        run["traces"][0]["input_pieces"][0] = PIECE
        run["pieces"] = {key: PIECE for key in run["pieces"]}
        for trace in run["traces"]:
            for op in trace["ops"]:
                if op["name"] == "layers.0.attn.q_proj":
                    op["name"] = f"layers.0.{STOP_LINK}"

    watched.upload(tampered(run_file, tmp_path, attack))
    status = watched.page.locator("#status")
    expect(status).to_contain_text("a saved run, shown without the model: ")
    watched.assert_nothing_ran_or_fetched()
    expect(status).to_contain_text(f"a saved run, shown without the model: {DESCRIPTION}")
    expect(status.locator("img, a, script")).to_have_count(0)
    strip = watched.page.locator("#token-strip")
    expect(strip.locator(".tok.prompt").first).to_contain_text(PIECE.replace(" ", "␣"))
    expect(strip.locator("img")).to_have_count(0)
    watched.page.get_by_role("tab", name="Journey", exact=True).click()  # the first tab is the forward pass
    journey = watched.page.locator("#journey-plot")
    expect(journey).to_contain_text(STOP_LINK)  # the stop's name as written, in the ticks
    expect(journey.locator(".main-svg a")).to_have_count(0)  # a label's <a href> is drawn as an SVG link
    watched.page.get_by_role("tab", name="Sampling", exact=True).click()
    expect(watched.page.locator("#sampling-plot")).to_contain_text("<img␣src=x")
    expect(watched.page.locator("#sampling-plot .main-svg a")).to_have_count(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    watched.page.screenshot(path=str(ARTIFACTS / "saved_run_hostile_text.png"), full_page=True)
    watched.assert_nothing_ran_or_fetched()  # nor on the sampling tab


def test_a_run_that_cannot_be_drawn_leaves_the_live_session(watched, run_file, tmp_path):
    from playwright.sync_api import expect

    page = watched.page
    page.locator("#prompt-box textarea").fill("Hi")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill:")
    # the run's own line (Gradio's progress text may still sit above it while the event ends)
    live = next(line for line in page.locator("#status").inner_text().splitlines() if line.startswith("prefill:"))

    def without_lm_head(run):  # the journey reads the vocabulary from it
        for op in run["traces"][0]["ops"]:
            if op["name"] == "lm_head":
                op["name"] = "lm_head_gone"

    watched.upload(tampered(run_file, tmp_path, without_lm_head))
    toast = page.get_by_test_id("toast-body").last
    expect(toast).to_be_visible()
    assert live in page.locator("#status").inner_text()  # Gradio adds an "Error" mark and keeps the text
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in")  # the live session runs on
    assert "saved run" not in page.locator("#status").inner_text()
    expect(toast).to_contain_text("traces[0].ops must be an lm_head stop")
    watched.assert_nothing_ran_or_fetched()
