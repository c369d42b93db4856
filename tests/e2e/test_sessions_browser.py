"""Sessions in headless Chromium against the app in hosted mode on the tiny model (loopback, in-process).

- Twenty plain HTTP clients that never open the heartbeat take every slot; a browser visitor is
  refused, then served once their lease runs out, and its own page (whose timer renews its lease)
  keeps its session past the lease (the leases run on a clock the test moves, the page's timer in
  real time).
- Twenty tabs closed 0.1-1.5 s after pressing Prefill (each prefill slowed to 1.6 s, so most close
  while it runs) leave no slot held, and twenty new visitors are then served (nineteen over plain
  HTTP, one in a page).
- Next token clicked three times while the first step runs: two steps run, and the page says why
  the third is refused.

Every visitor has its own page and address (`x-forwarded-for`, as a Space's proxy sends), and every
test its own app: nothing is shared between tests but the browser.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from pathlib import Path

import pytest
from served_app import PlainClient, serving, status_of, wait_until
from tiny_models import tiny_model

from explorer.errors import SessionStateError
from explorer.runner.session import InferenceSession
from explorer.ui.hosting import HOSTED, LiveSessions

TIMEOUT_MS = 30_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PROMPT = "Hi there!"
SLOW_PREFILL_S = 1.6
TABS_CLOSED = 10  # each opens a page in Chromium (seconds each): enough to close most of them mid-prefill


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=512)


@pytest.fixture
def visitor(new_page):
    """`visitor(url, address)`: a page of the app for one visitor at `address`, in a browser context of
    its own (as another person's browser: Chromium opens at most 6 connections to a host per context,
    and each open page holds one for Gradio's heartbeat), its prompt filled; closed when the test ends."""

    def open_visitor(url: str, address: str):
        page = new_page(url, 1200, 900, TIMEOUT_MS, extra_http_headers={"x-forwarded-for": address})
        page.locator("#prompt-box textarea").fill(PROMPT)
        return page

    return open_visitor


class Clock:
    """The live sessions' clock, moved by hand, seconds."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_twenty_heartbeatless_clients_then_a_browser_visitor_is_served(visitor, model):
    from playwright.sync_api import expect

    lease_s = 3.0  # the page's timer ticks every 0.5 s; the leases run on a clock the test moves
    with serving(model, dataclasses.replace(HOSTED, session_lease_s=lease_s, max_sessions=20)) as (url, served):
        clock = served.live.clock = Clock()
        page = visitor(url, "10.0.1.1")
        clients = [PlainClient(url, f"10.0.0.{i}") for i in range(20)]
        assert all("**prefill**" in status_of(c.call("prefill", {"Prompt": PROMPT})) for c in clients)
        page.locator("#prefill-btn").click()
        expect(page.get_by_test_id("toast-body").last).to_contain_text("The explorer is full: 20 sessions are in",
                                                                       timeout=TIMEOUT_MS)
        clock.now_s += lease_s + 1  # the silent clients' leases run out; the page's next tick frees them
        assert wait_until(lambda: len(served.live) == 0, 10)
        page.locator("#prefill-btn").click()
        expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
        (held,) = served.live._visits.values()
        for _ in range(4):  # two leases pass, half a lease at a time: the page's ticks renew its lease
            clock.now_s += lease_s / 2
            assert wait_until(lambda: held.renewed_s == clock.now_s, 10)
        page.locator("#decode-btn").click()
        expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in", timeout=TIMEOUT_MS)
        assert len(served.live) == 1
        for client in clients:
            client.close()


def test_ten_tabs_closed_mid_prefill_leak_no_slot_and_twenty_visitors_are_served(visitor, model, monkeypatch):
    from playwright.sync_api import expect

    running, slow = threading.Semaphore(0), threading.Event()
    slow.set()
    prefill, admit = InferenceSession.prefill, LiveSessions.admit
    admitted = []  # per prefill that reached `admit`: kept (True), or refused as its page had closed (False)

    def slow_prefill(self, *args, **kwargs):
        if slow.is_set():
            running.release()
            time.sleep(SLOW_PREFILL_S)  # kept: the point, a prefill long enough for its tab to close mid-way
        return prefill(self, *args, **kwargs)

    def counted_admit(self, *args, **kwargs):
        try:
            admit(self, *args, **kwargs)
            admitted.append(True)
        except SessionStateError as exc:
            admitted.append("page closed" not in str(exc))
            raise

    monkeypatch.setattr(InferenceSession, "prefill", slow_prefill)
    monkeypatch.setattr(LiveSessions, "admit", counted_admit)
    delays_s = random.Random(0).uniform
    with serving(model, HOSTED) as (url, served):
        for i in range(TABS_CLOSED):
            page = visitor(url, f"10.0.0.{i}")
            page.locator("#prefill-btn").click()
            pressed = time.monotonic()
            assert running.acquire(timeout=10)  # this tab's prefill runs (the one before it has ended)
            # kept: the point, the tab closes a chosen 0.1-1.5 s after Prefill was pressed
            time.sleep(max(0.0, delays_s(0.1, 1.5) - (time.monotonic() - pressed)))
            page.context.close()
            # its prefill ends; a session kept (the page closed after it) is freed by the page's unload
            assert wait_until(lambda n=i + 1: len(admitted) == n and len(served.live) == 0, 10), (i, admitted)
        mid_prefill = admitted.count(False)
        print(f"\n{TABS_CLOSED} tabs closed 0.1-1.5 s after Prefill: {mid_prefill} prefills finished after their "
              f"page closed (not kept), live sessions {len(served.live)}")
        assert len(served.live) == 0 and mid_prefill >= TABS_CLOSED // 2

        slow.clear()
        # nineteen new visitors over plain HTTP (a page load costs seconds here) and one in a page
        clients = [PlainClient(url, f"10.0.1.{i}") for i in range(19)]
        assert all("**prefill**" in status_of(c.call("prefill", {"Prompt": PROMPT})) for c in clients)
        page = visitor(url, "10.0.1.19")
        page.locator("#prefill-btn").click()
        expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
        assert len(served.live) == 20
        page.context.close()
        for client in clients:
            client.close()


def test_next_clicked_three_times_runs_two_steps_and_says_why_not_the_third(visitor, model, monkeypatch):
    from playwright.sync_api import expect

    decode_step, go = InferenceSession.decode_step, threading.Event()

    def held_decode_step(self, *args, **kwargs):  # the steps wait until the test lets them go
        go.wait(TIMEOUT_MS / 1000)
        return decode_step(self, *args, **kwargs)

    monkeypatch.setattr(InferenceSession, "decode_step", held_decode_step)
    with serving(model, HOSTED) as (url, served):
        page = visitor(url, "10.0.0.1")
        page.locator("#prefill-btn").click()
        expect(page.locator("#status")).to_contain_text("prefill:", timeout=TIMEOUT_MS)
        for _ in range(3):
            page.locator("#decode-btn").click()
        expect(page.get_by_test_id("toast-body").last).to_contain_text(
            "This page already has 2 steps, redraws or exports in the queue", timeout=TIMEOUT_MS)
        go.set()
        expect(page.locator("#status")).to_contain_text("step 2: 1 token(s) in", timeout=TIMEOUT_MS)
        (held,) = served.live._visits.values()
        assert len(held.visit.run.steps) == 3  # prefill and two steps: the third click never reached the queue
        page.screenshot(path=str(ARTIFACTS / "next_refused.png"), full_page=True)
