"""The one way every front end (the app, the CLI, the notebook, the lesson) runs decode steps."""

from __future__ import annotations

from collections.abc import Iterator

from explorer.config import SamplingSettings
from explorer.trace import StepTrace


def decode_steps(session, count: int, settings: SamplingSettings | None = None) -> Iterator[StepTrace]:
    """Run up to `count` decode steps of `session` (an `InferenceSession` after its prefill), yielding
    each step's trace as it is recorded; fewer where generation ends (an EOS token, max_new_tokens, a
    full context window). `settings` apply from the first step on (`InferenceSession.decode_step`).

    The first step always runs, so asking a finished session for a step raises rather than yielding
    nothing.

    Raises:
        SessionStateError: no prefill yet, generation already ended, or the previous step failed part-way.
    """
    for index in range(count):
        yield session.decode_step(settings if index == 0 else None)
        if session.finished:
            return
