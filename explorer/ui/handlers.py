"""Event handlers of the app: thin, one per event, every per-person value in the session state.

A handler takes the components' values, runs the session, and returns the components' new
values. An `ExplorerError` becomes a warning toast with its message, and every output is left as it
was (`gr.skip()`): the person's session and the figures on screen are kept.
"""

from __future__ import annotations

import functools

import gradio as gr

from explorer.config import SamplingSettings
from explorer.errors import ExplorerError, SamplingSettingsError, SessionStateError
from explorer.journey import journey_rows, shape_text, step_label
from explorer.runner.loading import LoadedModel
from explorer.runner.session import InferenceSession
from explorer.trace import StepTrace

VIEW_OUTPUTS = 5  # session state, status, generated text, journey rows, KV-cache lines
# A shared app refuses longer prompts: a 2k-token prefill takes seconds here, an 8k one minutes,
# and every visitor waits in the same queue (DESIGN.md budgets a 2,048-token prompt).
APP_MAX_PROMPT_TOKENS = 2048


def shows_errors(handler):
    """Turn an `ExplorerError` raised by `handler` into a warning toast; leave every output unchanged."""

    @functools.wraps(handler)
    def wrapped(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except ExplorerError as exc:
            gr.Warning(str(exc))
            return tuple(gr.skip() for _ in range(VIEW_OUTPUTS))

    return wrapped


def settings_from(do_sample: bool, temperature: float, top_k: float, top_p: float, min_p: float,
                  seed: float, max_new_tokens: float) -> SamplingSettings:
    """Sampling settings from the controls' values.

    Raises:
        SamplingSettingsError: a field left empty, or a value out of its range.
    """
    if None in (temperature, top_k, top_p, min_p, seed, max_new_tokens):
        raise SamplingSettingsError("Fill in every sampling field (an empty seed or max new tokens has no value).")
    return SamplingSettings(do_sample=bool(do_sample), temperature=float(temperature), top_k=int(top_k),
                            top_p=float(top_p), min_p=float(min_p), seed=int(seed),
                            max_new_tokens=int(max_new_tokens))


@shows_errors
def on_prefill_click(loaded: LoadedModel, prompt: str, prompt_tokens: float, use_chat_template: bool, *sampling):
    """Start a new session: run the prefill of `prompt` (or, with no tokenizer, of `prompt_tokens`
    placeholder tokens). Returns (session, *view)."""
    session = InferenceSession(loaded, settings_from(*sampling), max_prompt_tokens=APP_MAX_PROMPT_TOKENS)
    if loaded.tokenizer is None:
        session.prefill(prompt_tokens=int(prompt_tokens or 0))  # an empty box: "needs at least one token"
    else:
        session.prefill(prompt, use_chat_template=use_chat_template)
    return (session, *view(session))


@shows_errors
def on_decode_click(session: InferenceSession | None, *sampling):
    """Run one decode step of the person's session. Returns (session, *view)."""
    if session is None:
        raise SessionStateError("Run the prefill first: a decode step continues a prompt.")
    session.set_settings(settings_from(*sampling))
    session.decode_step()
    return (session, *view(session))


def view(session: InferenceSession) -> tuple[str, str, list[list[str]], str]:
    """(status line, generated text, journey rows of layer 0, KV-cache lines) of the session."""
    traces = session.traces
    decode = traces[-1] if len(traces) > 1 else None
    return status_text(traces[-1]), session.text, journey_rows(traces[0], decode), kv_text(traces)


def status_text(trace: StepTrace) -> str:
    """One line on the latest step: tokens in, context, wall time, chosen token and its probability."""
    chosen = repr(trace.token_text)
    if trace.sampling is not None:
        chosen += f" (p = {trace.sampling.token_prob:.3f})"
    if trace.shape_only:
        chosen = "none: shape-only mode has shapes but no values (times are Python overhead on the meta device)"
    line = (f"**{step_label(trace)}**: {len(trace.input_ids)} token(s) in, context n = {trace.context_length}, "
            f"{trace.wall_ms:.0f} ms; next token {chosen}")
    if trace.finished:
        line += f". Generation ended ({trace.finish_reason.replace('_', ' ')})."
    return line


def kv_text(traces: list[StepTrace]) -> str:
    """Layer 0's K cache after each step, under a heading, as a Markdown list."""
    return "**Layer 0 K cache** (V has the same shape)\n\n" + "\n".join(
        f"- after {step_label(t)}: K {shape_text(t.kv[0].key_shape)}, {t.kv[0].key_bytes:,} bytes"
        for t in traces
    )
