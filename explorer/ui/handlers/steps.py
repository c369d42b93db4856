"""The events that run the model on the page's run: Prefill, Next token, Run N tokens, and the two
answers to "go on from which step" (continue from the step shown, or from the latest).

Each turns the controls into typed values (`explorer.ui.handlers.controls`) once, runs the session
through `explorer.runner.drive`, and returns the step outputs (`explorer.ui.handlers.outputs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr

from explorer.analysis.measured import Scenario
from explorer.errors import SessionStateError
from explorer.runner.drive import decode_steps
from explorer.runner.locks import model_lock
from explorer.ui.handlers.controls import PromptControls, SamplingControls, ViewControls, index, split_controls
from explorer.ui.handlers.outputs import ended_outputs, offer_outputs, step_outputs
from explorer.ui.handlers.turns import in_turns, shown_waits
from explorer.ui.hosting import Served
from explorer.ui.live import visitor_of
from explorer.ui.toasts import shows_errors
from explorer.ui.views import Visit

if TYPE_CHECKING:
    from explorer.runner.session import InferenceSession


def prefill(served: Served, page: str, request: gr.Request | None, progress: gr.Progress | None,
            prompt: PromptControls, sampling: SamplingControls, view: ViewControls) -> tuple:
    """Start the page's new run: the prefill of the prompt on the chosen model, its progress shown
    layer by layer; the run becomes the page's session once it is done. Returns the step outputs.

    Raises:
        ExplorerError: settings past the app's limits, a model that cannot load, a prompt it refuses,
            no room for another session, or a page that closed meanwhile.
    """
    settings = sampling.allowed(served.limits)
    loaded = served.registry.get(prompt.model_choice, prompt.custom_model)  # waits for the start-up model's load
    from explorer.runner.session import InferenceSession  # imported by then (explorer.ui.launch)

    session = InferenceSession(loaded, settings, max_prompt_tokens=served.limits.max_prompt_tokens,
                               limit_advice=served.limit_advice())
    visitor = visitor_of(request)
    served.live.check_room(page, visitor)
    with model_lock(loaded.model).turn(shown_waits(progress)):
        _prefill(session, prompt, progress)
    visit = Visit.start(session, served.limits)
    served.live.admit(page, visit, visitor)  # refused if the page closed
    return step_outputs(visit, view)


def _prefill(session: InferenceSession, prompt: PromptControls, progress: gr.Progress | None) -> None:
    """The prefill of the prompt controls' prompt (or prompts, or token count), its progress shown."""
    on_start, on_layer = (None, None) if progress is None else _layer_progress(progress)
    if session.loaded.tokenizer is None:  # an empty box (0): "needs at least one token"
        session.prefill(prompt_tokens=index(prompt.prompt_tokens, 0, 2**62), on_layer=on_layer, on_start=on_start,
                        lm_head_all=bool(prompt.lm_head_all))
    else:
        prompts = prompt.prompts()
        session.prefill(None if prompts else prompt.prompt, use_chat_template=prompt.use_chat_template,
                        system_prompt=prompt.system(), on_layer=on_layer, enable_thinking=bool(prompt.enable_thinking),
                        lm_head_all=bool(prompt.lm_head_all), prompts=prompts, on_start=on_start)


def _layer_progress(progress: gr.Progress):
    """A prefill's `on_start` and `on_layer` callbacks that show, on the status line's progress bar,
    the prompt's estimated memory before the forward pass and then each layer done."""
    about = ""

    def on_start(n_tokens: int, estimate) -> None:
        nonlocal about
        if estimate is not None:
            about = f" ({estimate.total_bytes / 1e6:,.0f} MB estimated)"
            progress(0.0, desc=f"Prefill of {n_tokens:,} tokens: {estimate.summary()}")

    def on_layer(layer: int, n_layers: int) -> None:
        progress((layer + 1) / n_layers, desc=f"Prefill: layer {layer + 1} of {n_layers}{about}")

    return on_start, on_layer


@shows_errors
def on_decode_click(visit: Visit | None, do_sample: bool = False, temperature: float = 1.0, top_k: int = 0,
                    top_p: float = 1.0, min_p: float = 0.0, seed: float = 0, max_new_tokens: float = 64,
                    layer: int = 0, average_heads: bool = False, hardware: str = "", shown: str = "forward",
                    presenter: bool = False, zoom: int | None = None, what_if: Scenario | None = None,
                    progress: gr.Progress | None = gr.Progress()):
    """Run one decode step of this page's run (`_decode_from`), with the sampling settings from this
    step on (see /prefill for the parameters); while it waits for the model, `progress` says how many
    steps are ahead of it. Returns the step outputs."""
    sampling = SamplingControls(do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens)
    view = ViewControls(layer, average_heads, hardware, shown, presenter, zoom, what_if)
    return tuple(_decode_from(visit, 1, sampling, view, progress))[-1]


@shows_errors
def on_run_click(visit: Visit | None, count: float | None, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, seed: float = 0, max_new_tokens: float = 64,
                 layer: int = 0, average_heads: bool = False, hardware: str = "", shown: str = "forward",
                 presenter: bool = False, zoom: int | None = None, what_if: Scenario | None = None,
                 progress: gr.Progress | None = gr.Progress()):
    """Run up to `count` decode steps, redrawing after each; stops early where generation ends (see
    /prefill for the other parameters). Each step waits its turn on the model, so other pages' steps
    run between this run's (`explorer.ui.handlers.turns`). Yields the step outputs after each step."""
    session(visit)
    most = visit.limits.max_run_tokens
    if count is None or not 1 <= count <= most:
        raise SessionStateError(f"Run between 1 and {most} tokens at a time.")
    sampling = SamplingControls(do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens)
    view = ViewControls(layer, average_heads, hardware, shown, presenter, zoom, what_if)
    yield from _decode_from(visit, int(count), sampling, view, progress)


@shows_errors
def on_branch_click(visit: Visit | None, *controls):
    """Continue from the earlier step the page showed when it asked: the later steps are dropped, the
    KV cache cut back to that step (`InferenceSession.branch`), then the steps asked for are run.
    `controls`: the sampling controls, then the view controls."""
    step, count = _pending(visit)
    with visit.lock, model_lock(visit.session.loaded.model):
        session(visit).branch(step)
    yield from _decode(visit, count, *split_controls(controls), None)  # Gradio gives no progress to *controls


@shows_errors
def on_latest_click(visit: Visit | None, *controls):
    """Go on from the latest step instead: the steps asked for are run after it, nothing is dropped."""
    session(visit)
    _, count = _pending(visit)
    yield from _decode(visit, count, *split_controls(controls), None)  # Gradio gives no progress to *controls


def _decode_from(visit: Visit | None, count: int, sampling: SamplingControls, view: ViewControls,
                 progress: gr.Progress | None):
    """Decode `count` steps after the latest one, or, where the person went back to an earlier step
    (`Visit.viewing`: the page's step menu, read when it was chosen, not when a click was queued, so
    clicks queued during a step still run one after another), ask first whether to continue from it
    (the later steps dropped) or from the latest step; a finished generation says so on the status line."""
    session(visit)
    if visit.viewing is not None:
        visit.pending = (visit.viewing, count)
        return iter([offer_outputs(visit, visit.viewing)])
    return _decode(visit, count, sampling, view, progress)


def _decode(visit: Visit, count: int, sampling: SamplingControls, view: ViewControls, progress: gr.Progress | None):
    """Run up to `count` decode steps after the latest one, each in its turn on the model
    (`in_turns`), yielding the step outputs after each."""
    visit.viewing = None
    if visit.session.finished:
        yield ended_outputs(visit)
        return
    settings = sampling.allowed(visit.limits)  # kept only if the step runs
    for _ in in_turns(visit, decode_steps(visit.session, count, settings), count, progress):
        with visit.lock:
            outputs = step_outputs(visit, view)
        yield outputs


def freed_text(visit: Visit) -> str:
    """What a page whose session was freed says: why, and the one click that starts again."""
    return (f"This page's session was freed: the page showed no sign of life for {_minutes(visit.limits.session_lease_s)} "
            "(a tab in the background, a computer asleep, a dropped connection), so another visitor could have its "
            "slot. Press Prefill to start again: your prompt and settings are still here. A run you exported opens "
            "again from Settings: Load a saved run.")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} minute{'s' * (seconds != 60)}"


def _pending(visit: Visit | None) -> tuple[int, int]:
    session(visit)
    if visit.pending is None:
        raise SessionStateError("There is no step waiting to be run: press Next token.")
    return visit.pending


def session(visit: Visit | None) -> InferenceSession:
    """The page's live session.

    Raises:
        SessionStateError: no prefill yet, a session freed (its page idle or closed), or a saved run.
    """
    if visit is None:
        raise SessionStateError("Run the prefill first: a decode step continues a prompt.")
    if not visit.open:
        raise SessionStateError(freed_text(visit))
    if visit.saved:
        raise SessionStateError("This is a saved run: there is no model to run. Press Prefill to start a live one.")
    return visit.session
