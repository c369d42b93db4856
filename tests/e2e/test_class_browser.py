"""A class on the hosted app (tiny Llama, loopback, in-process): thirty pages in headless Chromium behind
one school address each press Prefill and get their figure; a thirty-first page from that address is
refused with a message naming the address cap; a gradio_client script opening sessions in a loop from
another address gets the address cap and no more, and the thirty pages are still served after it.

Every page is a browser context of its own (as each student's browser is), all sending the school's
address in `x-forwarded-for`, as a Space's proxy does. The app runs with 64 slots and an address cap
of 30 (`--max-sessions 64 --max-sessions-per-address 30`).
"""

from __future__ import annotations

import pytest
from served_app import serving
from tiny_models import tiny_model

from explorer.ui.hosting import HOSTED

CLASS = 30
SCHOOL, SCRIPT = "203.0.113.7", "198.51.100.9"
LIMITS = HOSTED.with_room(sessions=64, per_address=CLASS)
TIMEOUT_MS = 120_000  # thirty prefills and figures in one queue, on two busy cores
PROMPT = "Hi there!"


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=512)


def test_a_class_of_thirty_behind_one_address_is_served_and_a_script_cannot_shut_it_out(new_page, model):
    from gradio_client import Client
    from gradio_client.exceptions import AppError
    from playwright.sync_api import expect

    with serving(model, LIMITS) as (url, served):
        def student():
            page = new_page(url, 1000, 700, TIMEOUT_MS, extra_http_headers={"x-forwarded-for": SCHOOL})
            page.locator("#prompt-box textarea").fill(PROMPT)
            return page

        pages = [student() for _ in range(CLASS)]
        for page in pages:  # the lecturer says "press Prefill": thirty clicks at once
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
