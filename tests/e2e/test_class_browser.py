"""A class on the hosted app (tiny Llama, loopback, in-process), in headless Chromium: a class's pages
behind one school address each press Prefill and get their figure; one page more from that address is
refused with a toast naming the address cap; a gradio_client script opening sessions in a loop from
another address gets the address cap and no more, and the class's pages are still served after it.
A page whose Next token waits behind another page's run says on its status line how many steps are
ahead of it, and is served within the run.

Every page is a browser context of its own (as each student's browser is), all sending the school's
address in `x-forwarded-for`, as a Space's proxy does. The class here is six pages under an address cap
of six (each page loads the whole front end, seconds of a busy 2-core CPU); a class of thirty under the
cap of thirty, the app's `--max-sessions 64 --max-sessions-per-address 30`, is
tests/ui/test_class_http.py, over plain HTTP.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from served_app import serving
from tiny_models import tiny_model

from explorer.ui.hosting import HOSTED

CLASS = 6
SCHOOL, SCRIPT = "203.0.113.7", "198.51.100.9"
LIMITS = HOSTED.with_room(sessions=64, per_address=CLASS)
TIMEOUT_MS = 120_000  # a class's prefills and figures in one queue, on two busy cores
PROMPT = "Hi there!"
SLOW_STEP_S = 1.0
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=512)


def test_a_class_behind_one_address_is_served_and_a_script_cannot_shut_it_out(new_page, model):
    from gradio_client import Client
    from gradio_client.exceptions import AppError
    from playwright.sync_api import expect

    with serving(model, LIMITS) as (url, served):
        def student():
            page = new_page(url, 1000, 700, TIMEOUT_MS, extra_http_headers={"x-forwarded-for": SCHOOL})
            page.locator("#prompt-box textarea").fill(PROMPT)
            return page

        pages = [student() for _ in range(CLASS)]
        for page in pages:  # the lecturer says "press Prefill": every page clicks at once
            page.locator("#prefill-btn").click()
        for page in pages:
            expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
            expect(page.locator("#views .js-plotly-plot").first).to_be_visible(timeout=TIMEOUT_MS)
        assert len(served.live) == CLASS

        late = student()
        late.locator("#prefill-btn").click()
        expect(late.get_by_test_id("toast-body").last).to_contain_text(
            f"One network address may hold at most {CLASS} sessions at once", timeout=TIMEOUT_MS)

        served_to_script, refused = 0, []
        clients = [Client(url, verbose=False, headers={"x-forwarded-for": SCRIPT}) for _ in range(CLASS + 5)]
        for client in clients:  # one script, one session after another
            try:
                client.predict(prompt=PROMPT, use_chat_template=False, custom_model="", api_name="/prefill")
                served_to_script += 1
            except AppError as exc:
                refused.append(str(exc))
        print(f"\nthe script got {served_to_script} sessions of {len(clients)} asked; live sessions {len(served.live)}")
        assert served_to_script == CLASS and len(refused) == 5
        assert all(f"at most {CLASS} sessions at once" in message for message in refused)

        for page in pages:  # the class goes on: every page's Next token runs
            page.locator("#decode-btn").click()
        for page in pages:
            expect(page.locator("#status")).to_contain_text("step 1:", timeout=TIMEOUT_MS)
        for client in clients:
            client.close()


def test_a_page_waiting_behind_another_pages_run_says_how_many_steps_are_ahead(new_page, model, monkeypatch):
    from playwright.sync_api import expect

    from explorer.runner.session import InferenceSession

    decode_step = InferenceSession.decode_step

    def slow_decode_step(self, *args, **kwargs):
        time.sleep(SLOW_STEP_S)  # kept: the point, a step long enough for the other page to be seen waiting
        return decode_step(self, *args, **kwargs)

    monkeypatch.setattr(InferenceSession, "decode_step", slow_decode_step)
    with serving(model, LIMITS) as (url, served):
        runner, waiter = (new_page(url, 1280, 720, TIMEOUT_MS, extra_http_headers={"x-forwarded-for": SCHOOL})
                          for _ in range(2))
        for page in (runner, waiter):
            page.locator("#prompt-box textarea").fill(PROMPT)
            page.locator("#prefill-btn").click()
            expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
        runner.locator("#run-btn").click()
        expect(runner.locator("#status")).to_contain_text("step 1:", timeout=TIMEOUT_MS)
        waiter.locator("#decode-btn").click()
        expect(waiter.locator("#status")).to_contain_text("1 step ahead of yours", timeout=TIMEOUT_MS)
        waiter.screenshot(path=str(ARTIFACTS / "class-waiting.png"))
        expect(waiter.locator("#status")).to_contain_text("step 1:", timeout=TIMEOUT_MS)
        runs = sorted(len(held.visit.run.steps) - 1 for held in served.live._visits.values())
        assert runs[0] == 1 and runs[1] < 8  # the waiter's step was served within the run of 8, not after it
