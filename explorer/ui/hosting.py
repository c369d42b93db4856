"""What a shared app allows: limits on prompts, steps and sessions, and the models a hosted Space serves.

A laptop app (`python app.py`) gets `LOCAL`; a hosted Space (`SPACE_ID` set, or `--hosted`) gets
`HOSTED`: only allow-listed models, no local folders, shorter prompts and runs, a bounded queue.
`explorer.ui.live.LiveSessions` keeps one entry per open page so a closed page's KV cache and traces
are freed at once, a page that shows no sign of life is freed within minutes, and a room full of
visitors cannot open more sessions than the machine holds. `EventGate` keeps one page from filling
the shared queue.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass

from explorer.errors import ConfigError, SessionStateError
from explorer.run_schema import MAX_RUN_BYTES
from explorer.ui.live import SESSION_LEASE_S, LiveSessions
from explorer.ui.models import ModelRegistry

# Hub models a hosted Space may load besides the start-up model and the shape-only presets.
HOSTED_MODELS = ("Qwen/Qwen3-0.6B",)
# A laptop app keeps Gradio's hour of lease: its one visitor's lid may close in the middle of a lecture.
LOCAL_SESSION_LEASE_S = 3600.0
# The settings a Space's variables (or the command line) may change: the slots, and one address's share.
SESSIONS_VARIABLE = "EXPLORER_MAX_SESSIONS"
PER_ADDRESS_VARIABLE = "EXPLORER_MAX_SESSIONS_PER_ADDRESS"
PROXY_HOPS_VARIABLE = "EXPLORER_PROXY_HOPS"  # the proxies in front of the app whose x-forwarded-for is trusted


@dataclass(frozen=True)
class Limits:
    """Bounds on what one visitor may ask of a shared app.

    Attributes:
        max_prompt_tokens: longest prompt, tokens (a 2k-token prefill takes seconds here, and every
            visitor waits in the same queue; the app's budget is 2,048). It also caps the prompt and
            the system prompt in characters before tokenising (`runner.prompts.max_prompt_chars`).
        max_new_tokens: most decode steps of one session.
        max_run_tokens: most steps of one "Run N tokens" click.
        max_sessions: most live sessions, the app's slots (each holds up to ~300 MB at the longest prompt).
        allowed_models: hub ids loadable by name; None allows any hub id or local folder.
        max_sessions_per_address: most live sessions of one network address (None: no cap); a class
            behind one school network shares an address, so it is a class's worth, not one person's.
        max_sessions_per_user: most live sessions of one signed-in user (None: no cap).
        session_lease_s: a session is freed this many seconds after its page's last sign of life.
        session_idle_s: a session that ran no step, run or experiment this long gives its slot to a
            newcomer when the app is full (None: never).
        proxy_hops: the proxies in front of the app whose `x-forwarded-for` entries are trusted (1 on
            a Space; 0: the TCP peer is the visitor): `explorer.ui.live.client_address`.
        max_pending_events: most model events of one page in the queue at once, the running one
            included (None: no cap); 2 lets a second click wait behind the first.
        max_export_bytes: largest run export written, bytes (attention is left out first); None: no cap.
        max_upload_bytes: largest file a visitor may upload (a saved run), bytes; Gradio refuses a
            larger one while it arrives. Locally `run_schema.MAX_RUN_BYTES`, the largest saved run
            the app reads at all.
        max_upload_bytes_per_address: most bytes of uploads one network address holds at once (None:
            no cap): `explorer.ui.uploads.UploadBudget`.
        lab_caps: the lab's experiments capped at their hosted sizes (`LabParam.hosted_maximum`).
    """

    max_prompt_tokens: int = 2048
    max_new_tokens: int = 1024
    max_run_tokens: int = 256
    max_sessions: int = 64
    allowed_models: tuple[str, ...] | None = None
    max_sessions_per_address: int | None = None
    max_sessions_per_user: int | None = None
    session_lease_s: float = LOCAL_SESSION_LEASE_S
    session_idle_s: float | None = None
    proxy_hops: int = 0
    max_pending_events: int | None = None
    max_export_bytes: int | None = None
    max_upload_bytes: int = MAX_RUN_BYTES
    max_upload_bytes_per_address: int | None = None
    lab_caps: bool = False

    @property
    def queue_size(self) -> int | None:
        """Most events waiting in Gradio's queue: each live page's share of model events (None: unbounded)."""
        return None if self.max_pending_events is None else self.max_sessions * self.max_pending_events

    def with_room(self, sessions: int | None = None, per_address: int | None = None,
                  proxy_hops: int | None = None) -> Limits:
        """These limits with `sessions` slots, `per_address` sessions per address and `proxy_hops`
        trusted proxies (None: as they are).

        Raises:
            ConfigError: a count of sessions below 1, or of proxies below 0.
        """
        for name, value, least in (("--max-sessions", sessions, 1), ("--max-sessions-per-address", per_address, 1),
                                   ("--proxy-hops", proxy_hops, 0)):
            if value is not None and value < least:
                raise ConfigError(f"{name} must be at least {least}, not {value}.")
        return dataclasses.replace(self, max_sessions=sessions or self.max_sessions,
                                   max_sessions_per_address=per_address or self.max_sessions_per_address,
                                   proxy_hops=self.proxy_hops if proxy_hops is None else proxy_hops)


LOCAL = Limits()
# Judgement for a 2-vCPU, 16 GB Space: a prompt of 512 tokens prefills in about a second, 64
# sessions of 512 + 128 tokens hold at most about 13 GB (a 512-token prefill and a step peak at 210 MB
# over the model, measured: benchmarks/bench_memory.py), and a visitor waits behind at most 128
# events (each page at most 2 of them). 64 slots fit a class of 30 and its neighbours;
# one address (a class behind one school network) holds at most 48 of them, so 16 stay for everyone
# else, and one signed-in user at most 3. A session that ran nothing for 5 minutes gives its slot to a
# newcomer when the app is full. The Space's proxy is the one trusted hop of x-forwarded-for.
# An export of 64 MiB takes about 10 s to write here; 64 pages' latest exports hold at most 4 GB of disk.
# No saved run this app writes is larger than its export cap, so no larger upload is read; one address
# holds at most two of them at once (a saved run is deleted once read).
HOSTED = Limits(max_prompt_tokens=512, max_new_tokens=128, max_run_tokens=32, max_sessions=64,
                allowed_models=HOSTED_MODELS, max_sessions_per_address=48, max_sessions_per_user=3,
                session_lease_s=SESSION_LEASE_S, session_idle_s=300.0, proxy_hops=1, max_pending_events=2,
                max_export_bytes=64 * 2**20, max_upload_bytes=64 * 2**20, max_upload_bytes_per_address=128 * 2**20,
                lab_caps=True)


def limits_for(hosted: bool | None = None) -> Limits:
    """`HOSTED` when asked, or when running on Hugging Face Spaces (`SPACE_ID` is set); else `LOCAL`."""
    if hosted is None:
        hosted = bool(os.environ.get("SPACE_ID"))
    return HOSTED if hosted else LOCAL


class EventGate:
    """At most `most` events of one page in Gradio's queue at once (waiting or running), checked as
    the page sends one, before it is queued.

    `admit` must run on Gradio's event loop with no await between it and Gradio queueing the event
    (the last step of an `async` validator): no other check runs in between, so a burst of
    simultaneous requests from one page is cut at `most`.

    Args:
        most: the most events of one page in the queue at once.
        pending: a page's session hash -> the ids of its events in the queue now.
    """

    def __init__(self, most: int, pending: Callable[[str], set[str]]) -> None:
        self.most, self.pending = most, pending

    def admit(self, session_hash: str) -> None:
        """Let the page send one more event.

        Raises:
            SessionStateError: the page already has `most` events in the queue.
        """
        if len(self.pending(session_hash)) >= self.most:
            raise SessionStateError(
                f"This page already has {self.most} steps, redraws or exports in the queue (the explorer runs one "
                "at a time for everyone); this one was not added. Wait until they finish, then try again.")


def queued_events(demo) -> Callable[[str], set[str]]:
    """The gate's `pending` for a Gradio app: a page's gated events (those with a validator,
    `explorer.ui.wiring.gate_every_event`) from push until they end.

    Reads Gradio's queue records (`Queue.event_ids_to_events`, which holds an event from push until it
    ends; Gradio 6.31): not public API, so tests/ui/test_sessions_http.py checks through real requests
    that a burst is cut at the cap.
    """
    def ids(session_hash: str) -> set[str]:
        events = list(demo._queue.event_ids_to_events.values())
        return {event._id for event in events if event.session_hash == session_hash and event.fn.validator is not None}

    return ids


def page_state_dropper(demo) -> Callable[[str], None]:
    """A function that drops Gradio's records of a closed page (its `SessionState`: a copy of each
    component's config the page changed, about 340 KB here), which Gradio otherwise keeps an hour, up
    to `state_session_capacity` pages.

    Reads Gradio's `StateHolder.session_data` (Gradio 6.31): not public API, so tests/ui/test_sessions_http.py
    checks through real clients that closed pages leave none behind.
    """
    def drop(session_hash: str) -> None:
        holder = demo.state_holder
        with holder.lock:
            holder.session_data.pop(session_hash, None)
            holder.time_last_used.pop(session_hash, None)

    return drop


@dataclass
class Served:
    """What one running app serves: its models, its limits, its live sessions and, once the Gradio app
    exists, the gate on each page's model events (None: no cap) and what drops a closed page's
    records in Gradio (None: Gradio keeps them its hour)."""

    registry: ModelRegistry
    limits: Limits
    live: LiveSessions
    events: EventGate | None = None
    drop_page_state: Callable[[str], None] | None = None

    @classmethod
    def create(cls, registry: ModelRegistry, limits: Limits) -> Served:
        """A fresh app over `registry` under `limits`."""
        return cls(registry, limits, LiveSessions(limits.max_sessions, limits.max_sessions_per_address,
                                                  limits.max_sessions_per_user, limits.session_lease_s,
                                                  limits.session_idle_s))

    def limit_advice(self) -> str:
        """What a person whose prompt is past the limit can do."""
        if self.limits.allowed_models is not None:
            return "Shorten the prompt, or run the explorer on your own machine for longer ones."
        return "Shorten the prompt, or start the app with --max-prompt-tokens N (up to the model's context)."
