"""Event handlers of the app: thin, one per event, every per-person value in the session state.

A handler takes the components' values, runs the session or redraws a view, and returns the
components' new values. Only the view on screen (its tab selected) is drawn; another view is drawn
when its tab is selected, so a step costs one figure, not five. An `ExplorerError` becomes a `gr.Error` toast with its message; Gradio then
leaves every output as it was, so the person's session and the figures on screen are kept.
"""

from __future__ import annotations

import functools
import inspect

import gradio as gr

from explorer.config import SamplingSettings
from explorer.errors import ExplorerError, SamplingSettingsError, SessionStateError
from explorer.figures.theme import empty_figure
from explorer.journey import step_label
from explorer.runner.session import InferenceSession
from explorer.trace import StepTrace
from explorer.ui.models import ModelRegistry
from explorer.ui.tokens import token_strip_html
from explorer.ui.views import VIEWS, ViewOptions, Visit, render, roofline_view, sampling_view

# A shared app refuses longer prompts: a 2k-token prefill takes seconds here, an 8k one minutes,
# and every visitor waits in the same queue (DESIGN.md budgets a 2,048-token prompt).
APP_MAX_PROMPT_TOKENS = 2048
MAX_RUN_TOKENS = 256  # "Run N tokens" in one click; each step is also bounded by max new tokens
SAMPLING_INPUTS = 7  # do_sample, temperature, top-k, top-p, min-p, seed, max new tokens
EMPTY_VIEW = "Type a prompt and press Prefill."


def shows_errors(handler):
    """Turn an `ExplorerError` raised by `handler` (a function or a generator) into a `gr.Error` toast."""
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def wrapped_generator(*args, **kwargs):
            try:
                yield from handler(*args, **kwargs)
            except ExplorerError as exc:
                raise gr.Error(str(exc), title="Cannot do that", print_exception=False) from exc

        return wrapped_generator

    @functools.wraps(handler)
    def wrapped(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except ExplorerError as exc:
            raise gr.Error(str(exc), title="Cannot do that", print_exception=False) from exc

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
def on_prefill_click(registry: ModelRegistry, model_choice: str, custom_model: str, prompt: str,
                     prompt_tokens: float | None, use_chat_template: bool, system_prompt: str, *controls):
    """Start a new session on the chosen model: run the prefill of `prompt` (or, for a shape-only
    model without a tokenizer, of `prompt_tokens` placeholder tokens). Returns the step outputs."""
    sampling, view_controls = controls[:SAMPLING_INPUTS], controls[SAMPLING_INPUTS:]
    settings = settings_from(*sampling)
    loaded = registry.get(model_choice, custom_model)
    session = InferenceSession(loaded, settings, max_prompt_tokens=APP_MAX_PROMPT_TOKENS)
    if loaded.tokenizer is None:
        session.prefill(prompt_tokens=int(prompt_tokens or 0))  # an empty box: "needs at least one token"
    else:
        session.prefill(prompt, use_chat_template=use_chat_template, system_prompt=(system_prompt or "").strip() or None)
    return step_outputs(Visit.start(session), *view_controls)


@shows_errors
def on_decode_click(visit: Visit | None, *controls):
    """Run one decode step of the person's session. Returns the step outputs."""
    sampling, view_controls = controls[:SAMPLING_INPUTS], controls[SAMPLING_INPUTS:]
    session = _session(visit)
    session.set_settings(settings_from(*sampling))
    session.decode_step()
    return step_outputs(visit, *view_controls)


@shows_errors
def on_run_click(visit: Visit | None, count: float | None, *controls):
    """Run up to `count` decode steps, redrawing after each; stops early where generation ends."""
    sampling, view_controls = controls[:SAMPLING_INPUTS], controls[SAMPLING_INPUTS:]
    session = _session(visit)
    if count is None or not 1 <= count <= MAX_RUN_TOKENS:
        raise SessionStateError(f"Run between 1 and {MAX_RUN_TOKENS} tokens at a time.")
    session.set_settings(settings_from(*sampling))
    for _ in range(int(count)):
        session.decode_step()
        yield step_outputs(visit, *view_controls)
        if session.finished:
            return


def on_reset_click():
    """Forget the session: empty state, status, tokens, text, steps, and empty views."""
    empty = [empty_figure(view, EMPTY_VIEW) for view in VIEWS]
    return None, "", "", "", gr.update(choices=[], value=None), gr.skip(), *empty


@shows_errors
def on_view_change(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
                   shown: str):
    """Redraw the view on screen for other view controls (the model runs only to recompute attention
    the session gave up to stay within its memory budget)."""
    if visit is None:
        return tuple(gr.skip() for _ in VIEWS)
    return _views(visit, _options(visit, step, layer, average_heads, hardware), shown)


def on_tab_select(view: str):
    """The handler of a view's tab: remember it as the view on screen and draw it."""

    @shows_errors
    def select(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str):
        if visit is None:
            return view, gr.skip()
        return view, render(visit, _options(visit, step, layer, average_heads, hardware), view)

    return select


@shows_errors
def on_hardware_change(visit: Visit | None, step: int | None, hardware: str):
    """Redraw the roofline on another machine."""
    if visit is None:
        return gr.skip()
    return roofline_view(visit, _options(visit, step, 0, False, hardware))


def on_sampling_change(visit: Visit | None, step: int | None, *sampling):
    """Redraw the sampling view with the new settings applied to the shown step's stored logits."""
    if visit is None:
        return gr.skip()
    try:
        settings = settings_from(*sampling)
    except SamplingSettingsError as exc:
        gr.Warning(str(exc))
        return gr.skip()
    return sampling_view(visit, _options(visit, step, 0, False, ""), preview=settings)


def step_outputs(visit: Visit, layer: int, average_heads: bool, hardware: str, shown: str) -> tuple:
    """After a step: (visit, status, token strip, text, step menu, layer slider, *five views), the
    latest step shown, the view `shown` drawn and the others left as they are."""
    traces = visit.traces
    latest = len(traces) - 1
    n_layers = len(traces[0].kv)
    layer = max(0, min(int(layer), n_layers - 1))
    options = ViewOptions(latest, layer, bool(average_heads), hardware)
    next_piece = visit.piece(traces[-1].sampling.token_id) if traces[-1].sampling else None
    steps = gr.update(choices=[(step_label(t), t.step_index) for t in traces], value=latest)
    return (visit, status_text(visit), token_strip_html(traces, latest, next_piece), visit.session.text, steps,
            gr.update(maximum=n_layers - 1, value=layer), *_views(visit, options, shown))


def status_text(visit: Visit) -> str:
    """The model, then one line on the latest step: tokens in, context, wall time, chosen token."""
    trace = visit.traces[-1]
    line = f"{visit.session.loaded.description}\n\n**{step_label(trace)}**: {_step_summary(trace)}"
    if trace.finished:
        line += f". Generation ended ({trace.finish_reason.replace('_', ' ')})."
    return line


def _step_summary(trace: StepTrace) -> str:
    if trace.shape_only:
        chosen = "none: shape-only mode has shapes but no values (times are Python overhead on the meta device)"
    else:
        chosen = f"{trace.token_text!r} (p = {trace.sampling.token_prob:.3f})"
    return (f"{len(trace.input_ids)} token(s) in, context n = {trace.context_length}, "
            f"{trace.wall_ms:.0f} ms; next token {chosen}")


def _views(visit: Visit, options: ViewOptions, shown: str) -> tuple:
    """The five plot outputs: the figure of the view on screen, `gr.skip()` for the others."""
    return tuple(render(visit, options, view) if view == shown else gr.skip() for view in VIEWS)


def _session(visit: Visit | None) -> InferenceSession:
    if visit is None:
        raise SessionStateError("Run the prefill first: a decode step continues a prompt.")
    return visit.session


def _options(visit: Visit, step: int | None, layer: int, average_heads: bool, hardware: str) -> ViewOptions:
    latest = len(visit.traces) - 1
    step = latest if step is None else max(0, min(int(step), latest))
    layer = max(0, min(int(layer or 0), len(visit.traces[0].kv) - 1))
    return ViewOptions(step, layer, bool(average_heads), hardware)
