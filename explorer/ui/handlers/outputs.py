"""What a step's event sends back to the page, by name (`StepOutputs`), and the outputs of the
events that run or show a step: after a step, when generation has ended, when the page asks where
to go on from, and a saved run with every view drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import gradio as gr

from explorer.errors import ConfigError, ExplorerError
from explorer.figures.theme import empty_figure, plain_label
from explorer.figures.views import VIEWS, ViewOptions
from explorer.journey import step_label
from explorer.run import Run
from explorer.ui.handlers.controls import SAMPLING_FIELDS, ViewControls
from explorer.ui.status import generated_text, status_text, strip_html
from explorer.ui.views import Visit, render

EMPTY_VIEW = "Type a prompt and press Prefill."
# The components a step's event updates, in the order the layout wires them, then one plot per view.
STEP_OUTPUT_NAMES = ("visit", "status", "strip", "text", "step", "layer", "offer", "confirm_reset")
STEP_OUTPUTS = len(STEP_OUTPUT_NAMES) + len(VIEWS)
# A loaded run's prompt and sampling controls (`restored_controls`), after its step outputs.
RESTORED_INPUTS = ("prompt", "prompt_tokens", "use_chat_template", "system_prompt", "enable_thinking",
                   *SAMPLING_FIELDS)


@dataclass
class StepOutputs:
    """A step event's new values by component; `gr.skip()` (the default) leaves one as it is."""

    visit: Any = field(default_factory=gr.skip)  # the page's `Visit` (its gr.State)
    status: Any = field(default_factory=gr.skip)  # the status line (Markdown)
    strip: Any = field(default_factory=gr.skip)  # the token strip (HTML)
    text: Any = field(default_factory=gr.skip)  # the generated text
    step: Any = field(default_factory=gr.skip)  # the "Step shown" menu
    layer: Any = field(default_factory=gr.skip)  # the layer slider
    offer: Any = field(default_factory=gr.skip)  # the "go on from which step" question
    confirm_reset: Any = field(default_factory=gr.skip)  # Reset's "are you sure" question
    views: dict[str, Any] = field(default_factory=dict)  # a figure by view; a view not named is left as it is

    def values(self) -> tuple:
        """The values in the order the layout wires the components (`STEP_OUTPUT_NAMES`, then `VIEWS`)."""
        return (*(getattr(self, name) for name in STEP_OUTPUT_NAMES),
                *(self.views.get(view, gr.skip()) for view in VIEWS))


def step_outputs(visit: Visit, view: ViewControls) -> tuple:
    """`latest_step`'s values, in the order the layout wires them."""
    return latest_step(visit, view).values()


def latest_step(visit: Visit, view: ViewControls) -> StepOutputs:
    """After a step: the latest step shown (status line, token strip, text, step menu, layer slider's
    range), the question on where to go on from closed (hidden where it was asked; at a prefill
    Reset's question too), and the view on screen (`view.shown`) drawn, the others left as they are."""
    traces = visit.run.steps
    latest = len(traces) - 1
    visit.viewing = None
    options = view.options(visit)
    prefill = latest == 0
    return StepOutputs(
        visit, status_text(visit, latest), strip_html(visit, latest), generated_text(visit, latest),
        gr.update(choices=[(step_label(t), t.step_index) for t in traces], value=latest),
        gr.update(maximum=len(traces[0].kv) - 1, value=options.layer),
        hidden() if prefill else close_question(visit), hidden() if prefill else gr.skip(),
        shown_view(visit, options, view.shown))


def shown_view(visit: Visit, options: ViewOptions, shown: str) -> dict[str, Any]:
    """The figure of the view on screen, by view (the others are left as they are)."""
    return {shown: render(visit, options, shown)} if shown in VIEWS else {}


def hidden() -> dict:
    return gr.update(visible=False)


def close_question(visit: Visit) -> dict:
    """The "go on from which step" row's update: hidden where it was asked, else left as it is (a
    visibility update re-lays the page out in the browser, so it is sent only when it changes)."""
    asked, visit.pending = visit.pending is not None, None
    return hidden() if asked else gr.skip()


def offer_outputs(visit: Visit, step: int) -> tuple:
    """The step outputs that ask where to go on from: the status line says what each choice does, the
    two buttons appear; the rest stays as it is."""
    latest = visit.run.latest
    earlier = visit.run.steps[step]
    later = f"step {step + 1}" if step + 1 == latest.step_index else f"steps {step + 1} to {latest.step_index}"
    line = (f"{status_text(visit, step)}\n\n**Go on from which step?** \"Continue from step {step}\" drops "
            f"{later} and cuts the KV cache back to n = {earlier.context_length}; \"Go on from the latest\" "
            f"runs after {step_label(latest)} and drops nothing.")
    return StepOutputs(status=line, offer=gr.update(visible=True)).values()


def ended_outputs(visit: Visit) -> tuple:
    """The step outputs when generation has ended: a status line that says so and what to do next."""
    latest = visit.run.latest
    line = (f"{status_text(visit, latest.step_index)} Press Prefill for a new run, or pick an earlier step "
            "in \"Step shown\" and continue from it.")
    gr.Info(f"Generation ended ({latest.finish_reason.replace('_', ' ')}).", title="Done")
    return StepOutputs(status=line, offer=close_question(visit)).values()


def empty_outputs() -> tuple:
    """The step outputs of a page without a session: empty state, status, tokens, text and steps,
    every view saying how to start, the questions closed."""
    return StepOutputs(None, "", "", "", gr.update(choices=[], value=None), gr.skip(), hidden(), hidden(),
                       {view: empty_figure(view, EMPTY_VIEW) for view in VIEWS}).values()


def replay_outputs(visit: Visit, view: ViewControls) -> tuple:
    """`step_outputs` for a saved run, with every view drawn rather than the one on screen: a run
    that cannot be drawn is refused here, before it becomes the page's session.

    Raises:
        ConfigError: a view cannot be drawn from the run (the schema should have refused it).
    """
    outputs = latest_step(visit, replace(view, shown=""))
    outputs.offer = outputs.confirm_reset = hidden()  # no question of the page's previous run stays open
    options = view.options(visit)
    outputs.views = {name: _drawn_or_message(visit, options, name) for name in VIEWS}
    return outputs.values()


def _drawn_or_message(visit: Visit, options: ViewOptions, view: str):
    """The view's figure; a figure saying why where the run cannot show it (attention it gave up)."""
    try:
        return render(visit, options, view)
    except ExplorerError as exc:
        return empty_figure(view, plain_label(str(exc)))
    except Exception as exc:  # noqa: BLE001 - a file the schema let through still must not become the session
        raise ConfigError(f"The saved run is incomplete or damaged: its {view} view cannot be drawn "
                          f"({type(exc).__name__}: {exc}). Load the file as the explorer exported it, or "
                          "export the run again.") from exc


def restored_controls(run: Run) -> tuple:
    """The prompt and sampling controls as `run` had them (`RESTORED_INPUTS` order): the prompt its
    prefill was given (a file without it leaves those controls as they are) and the sampling settings
    of its latest step (shape-only mode samples nothing: those stay too)."""
    prompt = run.prompt
    if prompt is None:
        prompt_values = [gr.skip()] * 5
    else:
        prompt_values = [gr.skip() if prompt.text is None else prompt.text,
                         gr.skip() if prompt.prompt_tokens is None else prompt.prompt_tokens,
                         prompt.use_chat_template, prompt.system_prompt, prompt.enable_thinking]
    sampling = run.latest.sampling
    settings = [gr.skip()] * len(SAMPLING_FIELDS) if sampling is None else [
        sampling.settings[name] for name in SAMPLING_FIELDS]
    return (*prompt_values, *settings)
