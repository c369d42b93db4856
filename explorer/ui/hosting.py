"""What a shared app allows: limits on prompts, steps and sessions, and the models a hosted Space serves.

A laptop app (`python app.py`) gets `LOCAL`; a hosted Space (`SPACE_ID` set, or `--hosted`) gets
`HOSTED`: only allow-listed models, no local folders, shorter prompts and runs, a bounded queue.
`LiveSessions` keeps one entry per open page so a closed page's KV cache and traces are freed at
once, and a room full of visitors cannot open more sessions than the machine holds.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Protocol

from explorer.errors import SessionStateError
from explorer.ui.models import ModelRegistry

# Hub models a hosted Space may load besides the start-up model and the shape-only presets.
HOSTED_MODELS = ("Qwen/Qwen3-0.6B",)


@dataclass(frozen=True)
class Limits:
    """Bounds on what one visitor may ask of a shared app.

    Attributes:
        max_prompt_tokens: longest prompt, tokens (a 2k-token prefill takes seconds here, and every
            visitor waits in the same queue; DESIGN.md budgets 2,048).
        max_new_tokens: most decode steps of one session.
        max_run_tokens: most steps of one "Run N tokens" click.
        max_sessions: most live sessions (each holds up to ~300 MB at the longest prompt).
        queue_size: most events waiting in the queue (None: unbounded).
        allowed_models: hub ids loadable by name; None allows any hub id or local folder.
    """

    max_prompt_tokens: int = 2048
    max_new_tokens: int = 1024
    max_run_tokens: int = 256
    max_sessions: int = 64
    queue_size: int | None = None
    allowed_models: tuple[str, ...] | None = None


LOCAL = Limits()
# Judgement for a 2-vCPU, 16 GB Space: a prompt of 512 tokens prefills in about a second, 20
# sessions of 512 + 128 tokens hold well under 2 GB, and a visitor waits behind at most 32 events.
HOSTED = Limits(max_prompt_tokens=512, max_new_tokens=128, max_run_tokens=32, max_sessions=20, queue_size=32,
                allowed_models=HOSTED_MODELS)


def limits_for(hosted: bool | None = None) -> Limits:
    """`HOSTED` when asked, or when running on Hugging Face Spaces (`SPACE_ID` is set); else `LOCAL`."""
    if hosted is None:
        hosted = bool(os.environ.get("SPACE_ID"))
    return HOSTED if hosted else LOCAL


class Closable(Protocol):
    """A session that frees its memory on `close()`."""

    def close(self) -> None: ...


class LiveSessions:
    """The open pages' sessions, by Gradio session hash, at most `limit` of them.

    Args:
        limit: the most live sessions.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._visits: dict[str, Closable] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._visits)

    def check_room(self, session_hash: str) -> None:
        """Raise `SessionStateError` if the page has no session and `limit` other pages hold one."""
        if session_hash not in self._visits and len(self._visits) >= self.limit:
            raise SessionStateError(f"The explorer is serving {self.limit} sessions, its limit; "
                                    "try again in a few minutes.")

    def admit(self, session_hash: str, visit: Closable) -> None:
        """Record `visit` as the page's session; the page's previous session is closed.

        Raises:
            SessionStateError: `limit` other pages already hold a session.
        """
        with self._lock:
            self.check_room(session_hash)
            previous = self._visits.get(session_hash)
            self._visits[session_hash] = visit
        if previous is not None and previous is not visit:
            previous.close()

    def forget(self, visit: Closable) -> None:
        """Free `visit` wherever it is held (its page's state expired); a visit not held is ignored."""
        with self._lock:
            pages = [page for page, held in self._visits.items() if held is visit]
            for page in pages:
                del self._visits[page]
        visit.close()

    def release(self, session_hash: str) -> None:
        """Free the page's session (its page closed or it pressed Reset); unknown hashes are ignored."""
        with self._lock:
            visit = self._visits.pop(session_hash, None)
        if visit is not None:
            visit.close()


@dataclass
class Served:
    """What one running app serves: its models, its limits and its live sessions."""

    registry: ModelRegistry
    limits: Limits
    live: LiveSessions

    @classmethod
    def create(cls, registry: ModelRegistry, limits: Limits) -> Served:
        """A fresh app over `registry` under `limits`."""
        return cls(registry, limits, LiveSessions(limits.max_sessions))

    def limit_advice(self) -> str:
        """What a person whose prompt is past the limit can do."""
        if self.limits.allowed_models is not None:
            return "Shorten the prompt, or run the explorer on your own machine for longer ones."
        return "Shorten the prompt, or start the app with --max-prompt-tokens N (up to the model's context)."
