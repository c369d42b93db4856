"""Live sessions without a server: leases on a fake clock, pages that close mid-step, the caps per address
and per signed-in user, a full app's message, the per-page event cap, and the prompt's character cap,
through `LiveSessions`, `EventGate` and the handlers."""

from __future__ import annotations

import gradio as gr
import pytest

from explorer.errors import ConfigError, PromptError, SessionStateError
from explorer.runner.prompts import CHARS_PER_TOKEN_MAX, check_prompt_chars
from explorer.runner.session import InferenceSession
from explorer.ui import handlers
from explorer.ui.hosting import HOSTED, LOCAL, EventGate, Limits, Served
from explorer.ui.live import CLOSED_PAGES_KEPT, LiveSessions, Visitor, client_address, signed_in_user, visitor_of
from explorer.ui.models import ModelRegistry

GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)  # do_sample, temperature, top-k, top-p, min-p, seed, max new tokens
VIEW = (1, False, "h100-sxm", "journey")  # layer, average over heads, roofline hardware, the view on screen


class Clock:
    """A clock the test moves by hand, seconds."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class Visit:
    """A session that records whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Request:
    """What the handlers read of a `gr.Request`: the page's session hash and the visitor's address."""

    def __init__(self, page: str, address: str = "10.0.0.1") -> None:
        self.session_hash, self.headers, self.client = page, {"x-forwarded-for": address}, None


def prefill(served, page: str, prompt: str = "Hi there!", system: str = "", address: str = "10.0.0.1"):
    return handlers.ServedHandlers(served).on_prefill_click(
        Request(page, address), None, served.registry.default_choice, "", prompt, 17, bool(system), system, False, False, False,
        *GREEDY, *VIEW)


def test_a_session_whose_page_shows_no_sign_of_life_is_freed_after_its_lease():
    clock = Clock()
    live = LiveSessions(limit=2, lease_s=180, clock=clock)
    quiet, ticking = Visit(), Visit()
    live.admit("quiet", quiet)
    live.admit("ticking", ticking)
    with pytest.raises(SessionStateError, match="full: 2 sessions are in"):
        live.check_room("third")
    for _ in range(4):  # the open page's timer renews its lease; the other page never does
        clock.now_s += 60
        live.renew("ticking")
    assert quiet.closed and not ticking.closed and len(live) == 1
    live.check_room("third")  # room again
    clock.now_s += 181
    live.check_room("third")  # the room check itself frees a session whose lease ran out
    assert ticking.closed and len(live) == 0


def test_twenty_clients_that_never_renew_free_every_slot_within_the_lease():
    clock = Clock()
    live = LiveSessions(limit=20, lease_s=180, clock=clock)
    visits = [Visit() for _ in range(20)]
    for i, visit in enumerate(visits):
        live.admit(f"client-{i}", visit, Visitor(f"10.0.0.{i}"))
    with pytest.raises(SessionStateError, match="full: 20 sessions are in, as many as it holds"):
        live.check_room("visitor")
    clock.now_s += 90
    with pytest.raises(SessionStateError, match="full: 20 sessions are in"):
        live.check_room("visitor")  # 90 s later the slots are still leased
    clock.now_s += 91
    live.admit("visitor", Visit())
    assert all(visit.closed for visit in visits) and len(live) == 1


def test_a_session_admitted_after_its_page_closed_is_closed_at_once():
    live = LiveSessions(limit=2, clock=Clock())
    live.release("page", page_closed=True)  # the page closed while its prefill ran
    late = Visit()
    with pytest.raises(SessionStateError, match="The page closed before its step finished"):
        live.admit("page", late)
    assert late.closed and len(live) == 0
    live.release("reset-page")  # Reset is not a close: the page may prefill again
    live.admit("reset-page", Visit())
    assert len(live) == 1


def test_a_page_that_renews_after_a_close_is_open_again():
    """A page whose connection dropped and came back (Gradio fired its unload) ticks again: it may prefill."""
    live = LiveSessions(limit=2, clock=Clock())
    live.release("page", page_closed=True)
    live.renew("page")
    live.admit("page", Visit())
    assert len(live) == 1


def test_closed_pages_are_remembered_for_an_hour_and_at_most_a_bounded_number():
    clock = Clock()
    live = LiveSessions(limit=2, clock=clock)
    live.release("old", page_closed=True)
    for i in range(CLOSED_PAGES_KEPT):
        live.release(f"page-{i}", page_closed=True)
    assert len(live._closed_pages) == CLOSED_PAGES_KEPT and "old" not in live._closed_pages
    clock.now_s += 3601
    live.check_room("any")
    assert len(live._closed_pages) == 0


def test_a_class_behind_one_address_is_served_up_to_the_address_cap():
    live = LiveSessions(limit=64, per_address=40, per_user=3, clock=Clock())
    hall = Visitor("203.0.113.7")
    for i in range(40):  # forty anonymous pages behind one school address: forty visitors
        live.admit(f"student-{i}", Visit(), hall)
    with pytest.raises(SessionStateError, match=r"at most 40 sessions at once.*40 pages from yours.*Press Reset"):
        live.admit("student-40", Visit(), hall)
    live.admit("student-0", Visit(), hall)  # a page's new session replaces its own
    live.admit("elsewhere", Visit(), Visitor("10.0.0.2"))
    live.release("student-1")
    live.admit("student-40", Visit(), hall)
    assert len(live) == 41


def test_a_signed_in_user_holds_at_most_their_share_wherever_they_are():
    live = LiveSessions(limit=64, per_address=40, per_user=3, clock=Clock())
    for i in range(3):  # three pages, each from another address
        live.admit(f"tab-{i}", Visit(), Visitor(f"10.0.0.{i}", "ada"))
    with pytest.raises(SessionStateError, match=r"signed-in visitor may hold at most 3 sessions.*ada holds 3"):
        live.admit("tab-3", Visit(), Visitor("10.0.0.9", "ada"))
    live.admit("tab-4", Visit(), Visitor("10.0.0.1", "grace"))  # another user from one of ada's addresses
    live.admit("tab-5", Visit(), Visitor("10.0.0.1"))  # and an anonymous page
    assert len(live) == 5


def test_a_full_app_says_how_many_are_in_and_when_the_next_slot_frees():
    clock = Clock()
    live = LiveSessions(limit=3, lease_s=180, clock=clock)
    for i in range(3):
        live.admit(f"tab-{i}", Visit())
        clock.now_s += 20  # tab-0's lease is the oldest: it runs out 180 - 60 = 120 s from now
    with pytest.raises(SessionStateError, match=r"full: 3 sessions are in.*3 min after a page goes quiet.*"
                                                r"frees in 2 min at the latest.*press Prefill again"):
        live.check_room("new")
    clock.now_s += 75
    with pytest.raises(SessionStateError, match=r"frees in 45 s at the latest"):
        live.check_room("new")
    clock.now_s += 46
    live.check_room("new")  # tab-0's lease ran out: its slot is free


def test_the_visitor_is_the_signed_in_user_where_there_is_one():
    class Session(dict):
        pass

    oauth = type("R", (), {"headers": {"x-forwarded-for": "203.0.113.7"}, "client": None, "username": None,
                           "session": Session(oauth_info={"userinfo": {"preferred_username": "ada"}})})()
    assert visitor_of(oauth) == Visitor("203.0.113.7", "ada")
    auth = type("R", (), {"headers": {}, "client": None, "username": "grace"})()
    assert signed_in_user(auth) == "grace"

    class NoMiddleware:  # Starlette's request without a session middleware asserts on .session
        headers, client, username = {}, None, None

        @property
        def session(self):
            raise AssertionError("SessionMiddleware must be installed")

    assert visitor_of(NoMiddleware()) == Visitor("", None) == visitor_of(None)


def test_the_slots_the_address_cap_and_the_proxy_hops_are_settings():
    # a class of 30 and its neighbours fit; one address (a school's network) leaves a quarter to everyone else
    assert (HOSTED.max_sessions, HOSTED.max_sessions_per_address, HOSTED.queue_size) == (64, 48, 128)
    assert HOSTED.proxy_hops == 1 and LOCAL.proxy_hops == 0 and HOSTED.session_idle_s == 300
    room = HOSTED.with_room(sessions=45, per_address=30, proxy_hops=2)
    assert (room.max_sessions, room.max_sessions_per_address, room.queue_size, room.proxy_hops) == (45, 30, 90, 2)
    assert HOSTED.with_room() == HOSTED and HOSTED.with_room(proxy_hops=0).proxy_hops == 0
    with pytest.raises(ConfigError, match="--max-sessions-per-address must be at least 1, not 0"):
        HOSTED.with_room(per_address=0)
    with pytest.raises(ConfigError, match="--proxy-hops must be at least 0, not -1"):
        HOSTED.with_room(proxy_hops=-1)


def test_the_client_address_is_the_entry_the_trusted_proxies_added_else_the_peer():
    peer = type("Peer", (), {"host": "172.16.0.9"})()

    def request(forwarded: str | None):
        return type("R", (), {"headers": {} if forwarded is None else {"x-forwarded-for": forwarded}, "client": peer})()

    # a client wrote its own first entry; the Space's proxy appended the address it saw
    assert client_address(request("1.2.3.4, 203.0.113.7")) == "203.0.113.7"
    assert client_address(request("1.2.3.4, 203.0.113.7"), proxy_hops=1) == "203.0.113.7"
    assert client_address(request("1.2.3.4,203.0.113.7, 10.1.2.3"), proxy_hops=2) == "203.0.113.7"
    assert client_address(request("203.0.113.7"), proxy_hops=2) == "203.0.113.7"  # fewer entries than hops
    assert client_address(request("1.2.3.4"), proxy_hops=0) == "172.16.0.9"  # no proxy: the header is the client's
    assert client_address(request(None)) == client_address(request(" , ")) == "172.16.0.9"
    assert client_address(None) == ""


def test_a_full_app_gives_the_slot_of_the_session_idle_longest_to_a_newcomer():
    clock = Clock()
    live = LiveSessions(limit=3, lease_s=180, idle_s=60, clock=clock)
    visits = {page: Visit() for page in ("stepping", "idle", "idler")}
    for page, visit in visits.items():
        live.admit(page, visit, Visitor("10.0.0.1"))
        clock.now_s += 1
    with pytest.raises(SessionStateError, match="full: 3 sessions are in.*run nothing for 1 min.*frees in 57 s"):
        live.check_room("newcomer")  # no session has been idle a minute yet
    for _ in range(4):  # every page renews its lease (a figure asked, a timer tick); one also steps
        clock.now_s += 20
        for page in visits:
            live.renew(page, active=page == "stepping")
    live.admit("newcomer", Visit(), Visitor("10.0.0.2"))
    assert visits["idle"].closed and live.yielded("idle") and live.visit("idle") is None
    assert not visits["idler"].closed and not visits["stepping"].closed and not live.yielded("idler")
    live.admit("second", Visit(), Visitor("10.0.0.3"))  # the next idlest: "idler"
    assert visits["idler"].closed and not visits["stepping"].closed
    with pytest.raises(SessionStateError, match="full: 3 sessions are in"):
        live.check_room("third")  # the newcomers and the stepping page are active
    live.release("second")
    live.admit("idle", Visit())  # the page that yielded starts again
    assert not live.yielded("idle")


def test_a_visitor_at_its_address_cap_takes_no_idle_slot():
    clock = Clock()
    live = LiveSessions(limit=2, per_address=1, lease_s=180, idle_s=60, clock=clock)
    idle = Visit()
    live.admit("idle", idle, Visitor("10.0.0.1"))
    live.admit("mine", Visit(), Visitor("10.0.0.2"))
    clock.now_s += 100
    live.renew("idle")
    with pytest.raises(SessionStateError, match="One network address may hold at most 1"):
        live.check_room("another of mine", Visitor("10.0.0.2"))
    assert not idle.closed


def test_the_event_gate_admits_until_a_page_has_its_cap_in_the_queue():
    queued = {"page": set(), "other": set()}
    gate = EventGate(2, lambda page: queued[page])
    gate.admit("page")
    queued["page"] |= {"e1", "e2"}  # Gradio queued the first and a second event
    with pytest.raises(SessionStateError, match="This page already has 2 steps, redraws or exports in the queue"):
        gate.admit("page")
    gate.admit("other")  # another page is not held back
    queued["page"].discard("e1")  # the running one ended
    gate.admit("page")


def test_prompt_text_is_capped_in_characters_before_the_tokenizer_runs(model, monkeypatch):
    most = 512 * CHARS_PER_TOKEN_MAX
    check_prompt_chars("x" * most, "prompt", 512, "Shorten it.")
    with pytest.raises(PromptError, match=rf"The prompt is {most + 1:,} characters; here the limit is {most:,} "
                                          r"characters \(for 512 tokens\)\. Shorten it\."):
        check_prompt_chars("x" * (most + 1), "prompt", 512, "Shorten it.")
    check_prompt_chars("x" * 10**6, "prompt", None, "")  # no cap without a token cap

    def no_tokenizer(*args, **kwargs):
        raise AssertionError("the tokenizer ran")

    session = InferenceSession(model, max_prompt_tokens=8, limit_advice="Shorten the prompt.")
    monkeypatch.setattr(type(model.tokenizer), "__call__", no_tokenizer)
    monkeypatch.setattr(type(model.tokenizer), "apply_chat_template", no_tokenizer)
    with pytest.raises(PromptError, match=r"The system prompt is 129 characters; here the limit is 128"):
        session.prefill("Hi", system_prompt="s" * 129)
    with pytest.raises(PromptError, match=r"The prompt is 30,000,000 characters; here the limit is 128"):
        session.prefill("x" * 30_000_000, use_chat_template=False)


def test_a_huge_prompt_through_the_handler_is_the_same_message_and_keeps_the_session(model):
    served = Served.create(ModelRegistry(model), Limits(max_prompt_tokens=100))
    visit, *_ = prefill(served, "page")
    with pytest.raises(gr.Error, match=r"The prompt is 1,601 characters; here the limit is 1,600 characters "
                                       r"\(for 100 tokens\)\. Shorten the prompt, or start the app with"):
        prefill(served, "page", "x" * 1601)
    assert len(visit.run.steps) == 1 and len(served.live) == 1


def test_a_prefill_that_finishes_after_its_page_closed_holds_no_slot(model, monkeypatch):
    """The page-close handler runs while the prefill runs (before the prefill admits the session)."""
    served = Served.create(ModelRegistry(model), HOSTED)
    app = handlers.ServedHandlers(served)
    run_prefill = InferenceSession.prefill

    def closed_mid_prefill(self, *args, **kwargs):
        app.on_page_close(Request("page"))
        return run_prefill(self, *args, **kwargs)

    monkeypatch.setattr(InferenceSession, "prefill", closed_mid_prefill)
    with pytest.raises(gr.Error, match="The page closed before its step finished"):
        prefill(served, "page")
    assert len(served.live) == 0


def test_decode_on_a_session_freed_by_its_lease_says_so(model):
    clock = Clock()
    served = Served.create(ModelRegistry(model), Limits())
    served.live.clock = clock
    visit, *_ = prefill(served, "page")
    clock.now_s += served.limits.session_lease_s + 1
    served.live.check_room("other")
    with pytest.raises(gr.Error, match="This page's session was freed: .*60 minutes.* Press Prefill to start again"):
        handlers.on_decode_click(visit, *GREEDY, *VIEW)
    # the page's next timer tick says so on its status line, unasked; an open page's is left as it is
    assert "Press Prefill to start again" in handlers.ServedHandlers(served).on_lease_tick(Request("page"), visit)
    live_visit, *_ = prefill(served, "other")
    assert handlers.ServedHandlers(served).on_lease_tick(Request("other"), live_visit) == gr.skip()
    assert handlers.on_tab_select("journey")(visit, 0, 1, False, "h100-sxm") == ("journey", gr.skip())
