"""The open pages' sessions of a shared app, and who holds them.

A session belongs to one browser page (its Gradio session hash), held while the page renews its
lease (a timer in the page). Who the visitor is decides the caps: a signed-in user (Hugging Face
sign-in on a Space) holds at most a few sessions, and one network address holds at most a class's
worth, since a lecture hall, a school or a company reaches the app from one address (NAT): thirty
students behind it are thirty pages, each its own session, and one script from one address still
cannot take every slot. A full app lets a newcomer have the slot of the session idle longest (no
step, run or experiment for `idle_s`), so a script that only keeps its leases alive keeps no slot.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from explorer.errors import SessionStateError

# An open page renews its session's lease LEASE_RENEWALS times per lease (a timer in the page), so a
# session outlives a few missed ticks (a background tab whose timers the browser slows to one a
# minute, a network blip) but not a client that is gone: 3 minutes on a shared app, not Gradio's hour.
SESSION_LEASE_S = 180.0
LEASE_RENEWALS = 6
# A closed page is remembered this long (a step may finish long after its page closed: it waited in a
# queue, or loaded a model), at most this many (about 1 MB of session hashes).
CLOSED_PAGE_MEMORY_S = 3600.0
CLOSED_PAGES_KEPT = 10_000


@dataclass(frozen=True)
class Visitor:
    """Who asks for a session: the page's network address ("" where unknown) and, where the app has
    sign-in, the signed-in user's name (None: anonymous, then each page is a visitor of its own)."""

    address: str = ""
    user: str | None = None


def visitor_of(request, proxy_hops: int = 1) -> Visitor:
    """The visitor behind a Gradio request (`client_address`, `signed_in_user`); `Visitor()` for none."""
    return Visitor(client_address(request, proxy_hops), signed_in_user(request))


def client_address(request, proxy_hops: int = 1) -> str:
    """A visitor's address as the trusted proxies saw it; "" where there is no request.

    Each proxy appends the address it was reached from to `x-forwarded-for`, after whatever the client
    wrote there itself; so with `proxy_hops` trusted proxies in front of the app (1 on a Space), the
    visitor's address is the `proxy_hops`-th entry from the end, never an entry a client wrote in front
    of it. With `proxy_hops` 0 (an app reached directly), or no header, it is the TCP peer's host.
    """
    forwarded = (getattr(request, "headers", None) or {}).get("x-forwarded-for", "")
    entries = [entry.strip() for entry in forwarded.split(",") if entry.strip()]
    if proxy_hops > 0 and entries:
        return entries[max(len(entries) - proxy_hops, 0)]
    return getattr(getattr(request, "client", None), "host", "") or ""


def signed_in_user(request) -> str | None:
    """The signed-in user of a request: Gradio's `username` (an app served with `auth`), else the
    Hugging Face sign-in's `preferred_username` (Gradio's OAuth on Spaces keeps it in the request's
    session as "oauth_info"); None for an anonymous visitor or no request."""
    if getattr(request, "username", None):
        return request.username
    try:
        info = request.session.get("oauth_info") or {}
    except (AssertionError, AttributeError):  # no session middleware: no sign-in on this app
        return None
    return (info.get("userinfo") or {}).get("preferred_username") or None


class Closable(Protocol):
    """A session that frees its memory on `close()`."""

    def close(self) -> None: ...


@dataclass
class _Held:
    """A live session: its visit, who holds it, when its lease was last renewed and when it last
    stepped, ran or ran an experiment (clock s)."""

    visit: Closable
    visitor: Visitor
    renewed_s: float
    active_s: float


_APPS: weakref.WeakSet[LiveSessions] = weakref.WeakSet()  # every app's live sessions in this process


def close_all_sessions() -> None:
    """Close every live session of every app in this process (the app stops: their exports are deleted)."""
    for live in list(_APPS):
        live.close_all()


class LiveSessions:
    """The open pages' sessions, by Gradio session hash: at most `limit` of them, at most `per_address`
    from one network address and `per_user` of one signed-in user, each held only while its page
    shows it is open.

    A page shows it is open by renewing its lease (`renew`: a timer tick of the open page, or any of
    its model events); a session whose lease is older than `lease_s` is closed the next time room is
    checked, a session is admitted or a lease is renewed, so a client that never comes back (a plain
    HTTP client has no timer) holds its slot for minutes, not for Gradio's hour. A page that closed
    (`release(..., page_closed=True)`) is remembered for a while, so a prefill that finishes after its
    page closed is not kept.

    A lease renewed is no activity: only `renew(..., active=True)` (a step, a run, an experiment) and
    `admit` are. When the app is full, a newcomer gets the slot of the session idle longest, if it has
    been idle `idle_s` or more; its page is remembered (`yielded`), so it can say why on its next tick.

    Args:
        limit: the most live sessions.
        per_address: the most live sessions of one network address; None: no cap.
        per_user: the most live sessions of one signed-in user; None: no cap.
        lease_s: seconds a session is held after its page's last sign of life.
        idle_s: seconds without activity after which a session yields its slot to a newcomer when the
            app is full; None: never.
        clock: the time in seconds (`time.monotonic`; tests pass a fake one).
    """

    def __init__(self, limit: int, per_address: int | None = None, per_user: int | None = None,
                 lease_s: float = SESSION_LEASE_S, idle_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.per_address, self.per_user = limit, per_address, per_user
        self.lease_s, self.idle_s, self.clock = lease_s, idle_s, clock
        self._visits: dict[str, _Held] = {}
        self._closed_pages: OrderedDict[str, float] = OrderedDict()  # session hash -> when its page closed
        self._yielded: OrderedDict[str, float] = OrderedDict()  # session hash -> when its slot went to a newcomer
        self._lock = threading.Lock()
        _APPS.add(self)

    def __len__(self) -> int:
        return len(self._visits)

    def check_room(self, session_hash: str, visitor: Visitor = Visitor()) -> None:
        """Close the sessions whose lease ran out, then raise `SessionStateError` if the page has no
        session and there is no room for one (`limit` sessions held, or the visitor's caps reached)."""
        self._close(self._take_expired())
        with self._lock:
            yielded = self._check_room(session_hash, visitor)
        self._close(yielded)

    def admit(self, session_hash: str, visit: Closable, visitor: Visitor = Visitor()) -> None:
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
                expired += self._check_room(session_hash, visitor)
                previous = self._visits.get(session_hash)
                now = self.clock()
                self._visits[session_hash] = _Held(visit, visitor, now, now)
                self._yielded.pop(session_hash, None)
        except SessionStateError:
            visit.close()
            raise
        finally:
            self._close(expired)
        if previous is not None and previous.visit is not visit:
            previous.visit.close()

    def renew(self, session_hash: str, active: bool = False) -> None:
        """The page is open: restart its session's lease (if it holds one) and forget that it closed (a
        page whose connection dropped and came back); then close the sessions whose lease ran out.

        Args:
            active: the page steps, runs or runs an experiment (a redraw or a figure is not activity):
                its session is no longer idle.
        """
        with self._lock:
            self._closed_pages.pop(session_hash, None)
            held = self._visits.get(session_hash)
            if held is not None:
                held.renewed_s = self.clock()
                if active:
                    held.active_s = held.renewed_s
        self._close(self._take_expired())

    def yielded(self, session_hash: str) -> bool:
        """Whether the page's session gave its slot to a newcomer (it was idle longest in a full app)
        and the page has not started another since."""
        with self._lock:
            return session_hash in self._yielded

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

    def close_all(self) -> None:
        """Close every live session (the app stops)."""
        with self._lock:
            visits = [held.visit for held in self._visits.values()]
            self._visits.clear()
        self._close(visits)

    def _check_room(self, session_hash: str, visitor: Visitor) -> list[Closable]:
        """Raise `SessionStateError` if the page has no session and no room for one; where the app is
        full, the idlest session's slot is taken for it. Returns that session's visit, to be closed
        outside the lock (or none). Called under the lock."""
        if session_hash in self._visits:
            return []
        self._check_caps(visitor)
        if len(self._visits) < self.limit:
            return []
        now = self.clock()
        idle = [(held.active_s, page) for page, held in self._visits.items()
                if self.idle_s is not None and now - held.active_s >= self.idle_s]
        if not idle:
            raise SessionStateError(self._full_message())
        page = min(idle)[1]
        self._yielded[page] = now
        while len(self._yielded) > CLOSED_PAGES_KEPT:
            self._yielded.popitem(last=False)
        return [self._visits.pop(page).visit]

    def _check_caps(self, visitor: Visitor) -> None:
        """Raise `SessionStateError` if the visitor holds its signed-in user's or its address's cap."""
        if visitor.user is not None and self.per_user is not None:
            mine = sum(held.visitor.user == visitor.user for held in self._visits.values())
            if mine >= self.per_user:
                raise SessionStateError(
                    f"One signed-in visitor may hold at most {self.per_user} sessions at once here, and "
                    f"{visitor.user} holds {mine}: press Reset in a page you no longer use, or close it, and try again.")
        if visitor.address and self.per_address is not None:
            mine = sum(held.visitor.address == visitor.address for held in self._visits.values())
            if mine >= self.per_address:
                raise SessionStateError(
                    f"One network address may hold at most {self.per_address} sessions at once here (a class "
                    f"behind one school or company network shares one), and {mine} pages from yours hold one. "
                    "Press Reset in a page you no longer use, or close it, and try again; whoever runs the app "
                    "can raise the cap (--max-sessions-per-address).")

    def _full_message(self) -> str:
        """Why there is no slot: how many are in, and when the next one frees at the latest."""
        now = self.clock()
        frees_s = [held.renewed_s + self.lease_s - now for held in self._visits.values()]
        idle = ""
        if self.idle_s is not None:
            frees_s += [held.active_s + self.idle_s - now for held in self._visits.values()]
            idle = f", and for a newcomer when a session has run nothing for {_duration(self.idle_s)}"
        return (f"The explorer is full: {len(self._visits)} sessions are in, as many as it holds. A slot frees "
                f"when a visitor presses Reset or closes their page, {_duration(self.lease_s)} after a page goes "
                f"quiet{idle}; the next slot frees in {_duration(min(frees_s))} at the latest. Your prompt and "
                "settings stay here: press Prefill again then.")

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


def _duration(seconds: float) -> str:
    """`seconds` for a person: "45 s", "2 min 40 s", "3 min"."""
    whole = max(0, round(seconds))
    minutes, rest = divmod(whole, 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min" + (f" {rest} s" if rest else "")
