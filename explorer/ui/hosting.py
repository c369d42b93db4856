"""What a shared app allows: limits on prompts, steps and sessions, and the models a hosted Space serves.

A laptop app (`python app.py`) gets `LOCAL`; a hosted Space (`SPACE_ID` set, or `--hosted`) gets
`HOSTED`: only allow-listed models, no local folders, shorter prompts and runs, a bounded queue.
`LiveSessions` keeps one entry per open page so a closed page's KV cache and traces are freed at
once, a page that shows no sign of life is freed within minutes, and a room full of visitors cannot
open more sessions than the machine holds. `EventGate` keeps one page from filling the shared queue.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from explorer.errors import SessionStateError
from explorer.run_schema import MAX_RUN_BYTES
from explorer.ui.models import ModelRegistry

# Hub models a hosted Space may load besides the start-up model and the shape-only presets.
HOSTED_MODELS = ("Qwen/Qwen3-0.6B",)
# An open page renews its session's lease LEASE_RENEWALS times per lease (a timer in the page), so a
# session outlives a few missed ticks (a background tab whose timers the browser slows to one a
# minute, a network blip) but not a client that is gone: 3 minutes on a shared app, not Gradio's hour.
# A laptop app keeps Gradio's hour: its one visitor's lid may close in the middle of a lecture.
SESSION_LEASE_S = 180.0
LOCAL_SESSION_LEASE_S = 3600.0
LEASE_RENEWALS = 6
# A closed page is remembered this long (a step may finish long after its page closed: it waited in a
# queue of 32, or loaded a model), at most this many (about 1 MB of session hashes).
CLOSED_PAGE_MEMORY_S = 3600.0
CLOSED_PAGES_KEPT = 10_000


@dataclass(frozen=True)
class Limits:
    """Bounds on what one visitor may ask of a shared app.

    Attributes:
        max_prompt_tokens: longest prompt, tokens (a 2k-token prefill takes seconds here, and every
            visitor waits in the same queue; the app's budget is 2,048). It also caps the prompt and
            the system prompt in characters before tokenising (`runner.prompts.max_prompt_chars`).
        max_new_tokens: most decode steps of one session.
        max_run_tokens: most steps of one "Run N tokens" click.
        max_sessions: most live sessions (each holds up to ~300 MB at the longest prompt).
        queue_size: most events waiting in the queue (None: unbounded).
        max_sessions_per_client: most live sessions of one client address (None: no cap).
        session_lease_s: a session is freed this many seconds after its page's last sign of life.
        max_pending_events: most model events of one page in the queue at once, the running one
            included (None: no cap); 2 lets a second click wait behind the first.
        allowed_models: hub ids loadable by name; None allows any hub id or local folder.
        max_export_bytes: largest run export written, bytes (attention is left out first); None: no cap.
        max_upload_bytes: largest file a visitor may upload (a saved run), bytes; Gradio refuses a
            larger one while it arrives. Locally `run_schema.MAX_RUN_BYTES`, the largest saved run
            the app reads at all.
        lab_caps: the lab's experiments capped at their hosted sizes (`LabParam.hosted_maximum`).
    """

    max_prompt_tokens: int = 2048
    max_new_tokens: int = 1024
    max_run_tokens: int = 256
    max_sessions: int = 64
    queue_size: int | None = None
    allowed_models: tuple[str, ...] | None = None
    max_sessions_per_client: int | None = None
    session_lease_s: float = LOCAL_SESSION_LEASE_S
    max_pending_events: int | None = None
    max_export_bytes: int | None = None
    max_upload_bytes: int = MAX_RUN_BYTES
    lab_caps: bool = False


LOCAL = Limits()
# Judgement for a 2-vCPU, 16 GB Space: a prompt of 512 tokens prefills in about a second, 20
# sessions of 512 + 128 tokens hold well under 2 GB, and a visitor waits behind at most 32 events;
# one address holds at most 3 of the 20 sessions, and one page at most 2 of the 32 events.
# An export of 64 MiB takes about 10 s to write here; 20 pages' latest exports hold at most 1.3 GB of disk.
HOSTED = Limits(max_prompt_tokens=512, max_new_tokens=128, max_run_tokens=32, max_sessions=20, queue_size=32,
                allowed_models=HOSTED_MODELS, max_sessions_per_client=3, session_lease_s=SESSION_LEASE_S,
                max_pending_events=2, max_export_bytes=64 * 2**20, max_upload_bytes=64 * 2**20, lab_caps=True)


def limits_for(hosted: bool | None = None) -> Limits:
    """`HOSTED` when asked, or when running on Hugging Face Spaces (`SPACE_ID` is set); else `LOCAL`."""
    if hosted is None:
        hosted = bool(os.environ.get("SPACE_ID"))
    return HOSTED if hosted else LOCAL


class Closable(Protocol):
    """A session that frees its memory on `close()`."""

    def close(self) -> None: ...


class LiveSessions:
    """The open pages' sessions, by Gradio session hash: at most `limit` of them, at most
    `per_client` from one visitor's address, each held only while its page shows it is open.

    A page shows it is open by renewing its lease (`renew`: a timer tick of the open page, or any of
    its model events); a session whose lease is older than `lease_s` is closed the next time room is
    checked, a session is admitted or a lease is renewed, so a client that never comes back (a plain
    HTTP client has no timer) holds its slot for minutes, not for Gradio's hour. A page that closed
    (`release(..., page_closed=True)`) is remembered for a while, so a prefill that finishes after its
    page closed is not kept.

    Args:
        limit: the most live sessions.
        per_client: the most live sessions of one client address; None: no cap.
        lease_s: seconds a session is held after its page's last sign of life.
        clock: the time in seconds (`time.monotonic`; tests pass a fake one).
    """

    def __init__(self, limit: int, per_client: int | None = None, lease_s: float = SESSION_LEASE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.per_client, self.lease_s, self.clock = limit, per_client, lease_s, clock
        self._visits: dict[str, _Held] = {}
        self._closed_pages: OrderedDict[str, float] = OrderedDict()  # session hash -> when its page closed
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._visits)

    def check_room(self, session_hash: str, client: str = "") -> None:
        """Close the sessions whose lease ran out, then raise `SessionStateError` if the page has no
        session and `limit` other pages hold one, or `per_client` other pages of `client` do."""
        self._close(self._take_expired())
        with self._lock:
            self._check_room(session_hash, client)

    def admit(self, session_hash: str, visit: Closable, client: str = "") -> None:
        """Record `visit` as the page's session, its lease starting now; the page's previous session is closed.

        Raises:
            SessionStateError: the page closed while `visit` was made (then `visit` is closed), or
                there is no room for it (`check_room`).
        """
        expired = self._take_expired()
        try:
            with self._lock:
                if session_hash in self._closed_pages:
                    raise SessionStateError("The page closed before its step finished; its session was not kept.")
                self._check_room(session_hash, client)
                previous = self._visits.get(session_hash)
                self._visits[session_hash] = _Held(visit, client, self.clock())
        except SessionStateError:
            visit.close()
            raise
        finally:
            self._close(expired)
        if previous is not None and previous.visit is not visit:
            previous.visit.close()

    def renew(self, session_hash: str) -> None:
        """The page is open: restart its session's lease (if it holds one) and forget that it closed (a
        page whose connection dropped and came back); then close the sessions whose lease ran out."""
        with self._lock:
            self._closed_pages.pop(session_hash, None)
            held = self._visits.get(session_hash)
            if held is not None:
                held.renewed_s = self.clock()
        self._close(self._take_expired())

    def visit(self, session_hash: str) -> Closable | None:
        """The visit the page holds (the one its `gr.State` holds too), or None."""
        with self._lock:
            held = self._visits.get(session_hash)
        return None if held is None else held.visit

    def forget(self, visit: Closable) -> None:
        """Free `visit` wherever it is held (its page's state expired); a visit not held is ignored."""
        with self._lock:
            pages = [page for page, held in self._visits.items() if held.visit is visit]
            for page in pages:
                del self._visits[page]
        visit.close()

    def release(self, session_hash: str, page_closed: bool = False) -> None:
        """Free the page's session (it pressed Reset, or its page closed); unknown hashes are ignored.

        Args:
            page_closed: the page is gone: a session admitted for it later (a step that was running
                when it closed) is closed at once, unless the page renews its lease first.
        """
        with self._lock:
            held = self._visits.pop(session_hash, None)
            if page_closed:
                self._remember_closed(session_hash)
        if held is not None:
            held.visit.close()

    def _check_room(self, session_hash: str, client: str) -> None:
        if session_hash in self._visits:
            return
        if len(self._visits) >= self.limit:
            raise SessionStateError(f"The explorer is serving {self.limit} sessions, its limit; "
                                    "try again in a few minutes.")
        if self.per_client is not None and client:
            mine = sum(held.client == client for held in self._visits.values())
            if mine >= self.per_client:
                raise SessionStateError(
                    f"Here one visitor may hold at most {self.per_client} sessions at once, and {mine} pages from "
                    "your address hold one: press Reset in one of them, or close it, and try again.")

    def _take_expired(self) -> list[Closable]:
        """Drop the sessions whose lease ran out; returns their visits, to be closed outside the lock."""
        now = self.clock()
        with self._lock:
            expired = [page for page, held in self._visits.items() if now - held.renewed_s > self.lease_s]
            visits = [self._visits.pop(page).visit for page in expired]
            while self._closed_pages and now - next(iter(self._closed_pages.values())) > CLOSED_PAGE_MEMORY_S:
                self._closed_pages.popitem(last=False)
        return visits

    def _remember_closed(self, session_hash: str) -> None:
        self._closed_pages[session_hash] = self.clock()
        self._closed_pages.move_to_end(session_hash)
        while len(self._closed_pages) > CLOSED_PAGES_KEPT:
            self._closed_pages.popitem(last=False)

    @staticmethod
    def _close(visits: list[Closable]) -> None:
        for visit in visits:
            visit.close()


@dataclass
class _Held:
    """A live session: its visit, its page's client address, when its lease was last renewed (clock s)."""

    visit: Closable
    client: str
    renewed_s: float


class EventGate:
    """At most `most` model events of one page in Gradio's queue at once (waiting or running),
    checked as the page sends one, before it is queued.

    `admit` must run on Gradio's event loop with no await between it and Gradio queueing the event
    (the last step of an `async` validator): no other check runs in between, so a burst of
    simultaneous requests from one page is cut at `most`.

    Args:
        most: the most model events of one page in the queue at once.
        pending: a page's session hash -> the ids of its model events in the queue now.
    """

    def __init__(self, most: int, pending: Callable[[str], set[str]]) -> None:
        self.most, self.pending = most, pending

    def admit(self, session_hash: str) -> None:
        """Let the page send one more model event.

        Raises:
            SessionStateError: the page already has `most` model events in the queue.
        """
        if len(self.pending(session_hash)) >= self.most:
            raise SessionStateError(
                f"This page already has {self.most} steps or redraws in the queue (the explorer runs one at a "
                "time for everyone); this one was not added. Wait until they finish, then try again.")


def queued_events(demo, concurrency_id: str) -> Callable[[str], set[str]]:
    """The gate's `pending` for a Gradio app: a page's events of `concurrency_id` from push until they end.

    Reads Gradio's queue records (`Queue.event_ids_to_events`, which holds an event from push until it
    ends; Gradio 6.31): not public API, so tests/ui/test_sessions_http.py checks through real requests
    that a burst is cut at the cap.
    """
    def ids(session_hash: str) -> set[str]:
        events = list(demo._queue.event_ids_to_events.values())
        return {event._id for event in events
                if event.session_hash == session_hash and event.concurrency_id == concurrency_id}

    return ids


def client_address(request) -> str:
    """A visitor's address: the first entry of `x-forwarded-for` (a Space's proxy puts the visitor's
    address there; the TCP peer is the proxy), else the TCP peer's host; "" where there is no request.

    A client that writes its own `x-forwarded-for` can pose as another address: the per-client cap
    slows one visitor down, the total cap and the lease are what hold.
    """
    forwarded = (getattr(request, "headers", None) or {}).get("x-forwarded-for", "").split(",")[0].strip()
    return forwarded or getattr(getattr(request, "client", None), "host", "") or ""


@dataclass
class Served:
    """What one running app serves: its models, its limits, its live sessions and, once the Gradio app
    exists, the gate on each page's model events (None: no cap)."""

    registry: ModelRegistry
    limits: Limits
    live: LiveSessions
    events: EventGate | None = None

    @classmethod
    def create(cls, registry: ModelRegistry, limits: Limits) -> Served:
        """A fresh app over `registry` under `limits`."""
        return cls(registry, limits, LiveSessions(limits.max_sessions, limits.max_sessions_per_client,
                                                  limits.session_lease_s))

    def limit_advice(self) -> str:
        """What a person whose prompt is past the limit can do."""
        if self.limits.allowed_models is not None:
            return "Shorten the prompt, or run the explorer on your own machine for longer ones."
        return "Shorten the prompt, or start the app with --max-prompt-tokens N (up to the model's context)."
