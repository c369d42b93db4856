"""Sessions and the queue over real HTTP, against the app on a loopback port in hosted mode (tiny model).

Clients here are `PlainClient`s (tests/served_app.py): plain HTTP, no heartbeat, no timer, each with
its own address in `x-forwarded-for` as a Space's proxy sends it. Twenty of them fill every session
slot and then never come back; the lease (cut to 6 s here) frees the slots. One page's burst of
events is cut at its cap while another page is served. A 30 MB prompt is refused before it is
queued, by a server in its own process so that its memory is read apart from the client's.
Run with `-s` to print the measured figures.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from served_app import PlainClient, serving, status_of, wait_until
from tiny_models import tiny_model

from explorer.runner.session import InferenceSession
from explorer.ui.hosting import HOSTED

# The hosted lease (3 minutes) cut so the test runs in seconds, yet long enough that all twenty
# prefills (each drawing the view on screen) are served before the first lease runs out, on a busy
# 2-core machine too.
LEASE_S = 6.0
HOSTED_FAST = dataclasses.replace(HOSTED, session_lease_s=LEASE_S)
PROMPT = {"Prompt": "Hi there!", "Use the chat template": False}
TESTS = Path(__file__).resolve().parents[1]
MIB = 2**20


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=512)


def test_twenty_heartbeatless_clients_hold_the_slots_only_for_the_lease(model):
    with serving(model, HOSTED_FAST) as (url, served):
        clients = [PlainClient(url, f"10.0.0.{i}") for i in range(20)]
        statuses = [status_of(client.call("prefill", PROMPT)) for client in clients]
        assert all("**prefill**" in status for status in statuses) and len(served.live) == 20
        visitor = PlainClient(url, "10.0.1.1")
        refused = status_of(visitor.call("prefill", PROMPT))
        assert "The explorer is full: 20 sessions are in, as many as it holds" in refused
        start = time.monotonic()
        served_again = wait_until(lambda: "**prefill**" in status_of(visitor.call("prefill", PROMPT)), 10 * LEASE_S)
        waited_s = time.monotonic() - start
        # the visitor's own events renew its lease and free the sessions whose lease ran out
        all_freed = wait_until(lambda: visitor.call("decode") and len(served.live) == 1, 10 * LEASE_S)
        print(f"\n20 heartbeat-less clients: a visitor refused, then served {waited_s:.1f} s later (lease "
              f"{LEASE_S} s); every silent client's session freed {time.monotonic() - start:.1f} s after the refusal")
        assert served_again and all_freed
        for client in [*clients, visitor]:
            client.close()


def test_one_address_holds_at_most_its_cap_of_sessions(model):
    with serving(model, HOSTED.with_room(per_address=3)) as (url, served):
        tabs = [PlainClient(url, "203.0.113.7") for _ in range(4)]
        statuses = [status_of(tab.call("prefill", PROMPT)) for tab in tabs]
        assert all("**prefill**" in status for status in statuses[:3])
        assert "One network address may hold at most 3 sessions at once here" in statuses[3]
        assert "**prefill**" in status_of(PlainClient(url, "203.0.113.8").call("prefill", PROMPT))
        assert tabs[0].call("reset")["success"]
        assert "**prefill**" in status_of(tabs[3].call("prefill", PROMPT))


def test_one_pages_burst_is_cut_at_its_cap_and_another_page_is_served(model, monkeypatch):
    decode_step, go = InferenceSession.decode_step, threading.Event()

    def held_decode_step(self, *args, **kwargs):  # the steps hold the model queue until the test lets them go
        go.wait(30)
        return decode_step(self, *args, **kwargs)

    monkeypatch.setattr(InferenceSession, "decode_step", held_decode_step)
    with serving(model, HOSTED) as (url, served):
        page, other = PlainClient(url, "10.0.0.1"), PlainClient(url, "10.0.0.2")
        for client in (page, other):
            client.call("prefill", PROMPT)
        with ThreadPoolExecutor(12) as pool:
            burst = list(pool.map(lambda _: page.join("decode"), range(12)))
        codes = [answer.status_code for answer in burst]
        refusals = {answer.json()["detail"] for answer in burst if answer.status_code != 200}
        assert other.join("decode").status_code == 200  # another page's step is queued behind the page's two
        go.set()
        assert "**step 1**" in status_of(other.results()[0])
        assert codes.count(200) == 2 and codes.count(400) == 10, codes
        assert refusals == {"This page already has 2 steps or redraws in the queue (the explorer runs one at a time "
                            "for everyone); this one was not added. Wait until they finish, then try again."}
        assert [status_of(m).split("\n\n")[-1][:10] for m in page.results(2)] == ["**step 1**", "**step 2**"]
        assert page.join("decode").status_code == 200  # once they finished, the page may send more


def test_the_prompt_boxes_stop_at_the_character_cap(model):
    with serving(model, HOSTED) as (url, served):
        components = {c["props"].get("elem_id"): c["props"] for c in PlainClient(url).config["components"]}
    assert components["prompt-box"]["max_length"] == components["system-prompt"]["max_length"] == 512 * 16


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's resident set (VmRSS) or its peak since the last reset (VmHWM), MiB (Linux /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":")) / 1024


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads the server's memory from Linux /proc")
def test_a_30_mb_prompt_is_refused_before_the_queue_without_growing_the_server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(TESTS / "served_app.py"), str(port)], cwd=TESTS.parent,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"})
    url = f"http://127.0.0.1:{port}/"
    try:
        assert wait_until(lambda: _answers(url), 120), "the server did not start"
        client = PlainClient(url, "10.0.0.1")
        client.call("prefill", PROMPT)  # warm: the first prefill's one-time costs are not the prompt's
        before_mib = rss_mib(server.pid)
        with open(f"/proc/{server.pid}/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")  # restart the peak (VmHWM) count from now
        start = time.perf_counter()
        refused = client.join("prefill", PROMPT | {"Prompt": "x" * 30_000_000})
        refused_s = time.perf_counter() - start
        peak_mib, after_mib = rss_mib(server.pid, "VmHWM"), rss_mib(server.pid)
        messages = [v["message"] for v in refused.json()["detail"] if not v["is_valid"]]
        print(f"\n30 MB prompt: HTTP {refused.status_code} in {refused_s:.2f} s (sending included); server RSS "
              f"{before_mib:.0f} MiB before, peak {peak_mib:.0f} (+{peak_mib - before_mib:.0f}), "
              f"{after_mib:.0f} after (+{after_mib - before_mib:.0f})")
        assert refused.status_code == 422
        assert messages == ["The prompt is 30,000,000 characters; here the limit is 8,192 characters (for 512 "
                            "tokens). Shorten the prompt, or run the explorer on your own machine for longer ones."]
        assert after_mib - before_mib < 100
        assert "**prefill**" in status_of(client.call("prefill", PROMPT))  # the page's next prefill is served
    finally:
        server.terminate()
        server.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "config", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_run_of_16_tokens_lets_another_pages_next_token_through_within_a_few_steps(model):
    endless = dataclasses.replace(model, eos_token_ids=[])  # no token ends the run before its 16 steps
    with serving(endless, dataclasses.replace(HOSTED, max_run_tokens=16)) as (url, served):
        runner, other = PlainClient(url, "10.0.0.1"), PlainClient(url, "10.0.0.2")
        for client in (runner, other):
            client.call("prefill", PROMPT | {"Max new tokens": 128})
        steps = lambda: len(served.live.visit(runner.session_hash).run.steps) - 1  # noqa: E731 - the run's steps done
        assert runner.join("run", {"N": 16, "Max new tokens": 128}).status_code == 200
        assert wait_until(lambda: steps() >= 3, 60)
        before = steps()
        assert "**step 1**" in status_of(other.call("decode"))
        meanwhile = steps() - before
        assert runner.results()[0]["success"]
        print(f"\nanother page's Next token waited for {meanwhile} of a 16-token run's steps")
        # its own wait is for the step in flight; the run's next steps go on while its figure is drawn and sent
        assert steps() == 16 and meanwhile <= 4  # a wait for the whole run would count its rest, about 12
        for client in (runner, other):
            client.close()
