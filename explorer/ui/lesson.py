"""The guided lesson in the app: a page at a time over the page's own run (`explorer.lesson`).

Each page sets the app state it speaks of (its view's tab, the layer, the latest step, the
roofline's what-if batch) and draws that view, so the sentences and the figure on screen agree; the
end of the lesson puts back the tab, the layer and the what-if it found (`BeforeLesson`). A
run with only its prefill gets one decode step first, with the sampling settings on the page (the
lesson says so): the lesson drives the real run, it does not show a canned one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from explorer.analysis.measured import Scenario
from explorer.errors import ExplorerError, SessionStateError
from explorer.figures.theme import empty_figure, plain_label
from explorer.lesson import PAGES, LessonInputs, LessonPage, page_layer, page_text
from explorer.runner.drive import decode_steps
from explorer.ui.handlers.controls import AS_RUN, SamplingControls, ViewControls, split_controls
from explorer.figures.views import VIEWS
from explorer.ui.handlers.outputs import STEP_OUTPUT_NAMES, latest_step
from explorer.ui.toasts import shows_errors
from explorer.ui.views import Visit, every_layer_sinks, roofline_machine

# After the step outputs: the lesson's panel, its text, its page index, the view tabs, the view on
# screen, the roofline's what-if, its batch menu, and what the lesson found when it opened.
LESSON_OUTPUTS = ("lesson_panel", "lesson_text", "lesson_page", "tabs_selected", "shown", "what_if", "wi_batch",
                  "lesson_before")


@dataclass(frozen=True)
class BeforeLesson:
    """What the lesson's pages change, as it was when the lesson opened: put back when it ends.

    Attributes:
        shown: the view whose tab was selected (a view, or an experiment's tab).
        layer: the layer shown.
        what_if: the roofline's what-if (None: as run).
    """

    shown: str
    layer: float
    what_if: Scenario | None


def on_lesson_move(delta: int):
    """The handler of the lesson's Previous (-1), Next (+1) or open (0: the first page, or the page
    it was on) button: go to that page, set up its app state and draw its view."""

    @shows_errors
    def move(visit: Visit | None, index: int | None, before: BeforeLesson | None, *controls):
        """`controls`: the sampling controls, then the view controls' layer, heads averaged, machine,
        view on screen, presenter mode and zoom (the page sets the layer, the view and the what-if);
        `before`: what the open lesson found (None while it is closed: taken now)."""
        sampling, view = split_controls(controls)
        if visit is None or not visit.open:
            raise SessionStateError("The lesson speaks of your own run: type a prompt (or keep the example), "
                                    "press Prefill, then open the lesson.")
        found = BeforeLesson(view.shown, view.layer, view.what_if) if index is None or before is None else before
        index = 0 if index is None else max(0, min(index + delta, len(PAGES) - 1))
        ran = _ensure_decode_step(visit, sampling)
        return (*lesson_outputs(visit, index, view, ran), found)

    return move


@shows_errors
def on_lesson_close(visit: Visit | None, before: BeforeLesson | None, *controls):
    """End the lesson: its panel hidden, and the tab, the layer and the roofline's what-if it found
    put back (that view drawn at the latest step); `controls` as `on_lesson_move`'s. Returns the step
    outputs, then `LESSON_OUTPUTS`."""
    _, view = split_controls(controls)
    if before is None or visit is None or not visit.open:  # nothing to put back, or no run to draw
        return (*(gr.skip() for _ in (*STEP_OUTPUT_NAMES, *VIEWS)), gr.update(visible=False), gr.skip(), None,
                *(gr.skip() for _ in range(4)), None)
    what_if = before.what_if or Scenario()
    outputs = latest_step(visit, replace(view, shown=before.shown, layer=before.layer, what_if=what_if))
    return (*outputs.values(), gr.update(visible=False), gr.skip(), None, gr.update(selected=before.shown),
            before.shown, what_if, str(what_if.batch) if what_if.batch else AS_RUN, None)


def lesson_outputs(visit: Visit, index: int, view: ViewControls, ran: bool = False) -> tuple:
    """The step outputs with page `index`'s view drawn (its layer, view and what-if in place of
    `view`'s), then `LESSON_OUTPUTS` but the last."""
    page = PAGES[index]
    run = visit.run
    n_layers = len(run.steps[0].kv)
    layer, step = page_layer(page, n_layers), len(run.steps) - 1
    scenario = Scenario(batch=page.batch)
    machine = roofline_machine(visit, view.hardware)
    q_len = run.steps[step].attention[layer].shape[1] if run.steps[step].attention else 0
    # the step's last query row only: a long prefill's whole matrix is not needed
    attention = visit.attention.probs(step, layer, rows=(q_len - 1, q_len)) if visit.attention.has(step, layer) else None
    sinks = every_layer_sinks(visit, step) if page.key == "sinks" and not run.steps[step].shape_only else None
    text = page_text(page, LessonInputs(run, step, layer, machine, attention, sinks, visit.sink_threshold,
                                        run.equivalence))
    view = replace(view, layer=layer, shown=page.view, what_if=scenario)
    try:
        outputs = latest_step(visit, view)
    except ExplorerError as exc:  # a saved run without this view's values: the figure says so
        outputs = latest_step(visit, replace(view, shown=""))
        outputs.views = {page.view: empty_figure(page.view, plain_label(str(exc)))}
    # a roofline page sets the what-if it speaks of (and its batch box, so the settings say so)
    what_if = (scenario, str(page.batch)) if page.view == "roofline" else (gr.skip(), gr.skip())
    return (*outputs.values(), gr.update(visible=True), _page_markdown(page, index, text, ran), index,
            gr.update(selected=page.view), page.view, *what_if)


def _ensure_decode_step(visit: Visit, sampling: SamplingControls) -> bool:
    """Run one decode step where the run has only its prefill (the pages speak of a decode step);
    True if one ran.

    Raises:
        SessionStateError: a saved run with no decode step (no model to run one), or a finished one.
    """
    if len(visit.run.steps) > 1:
        return False
    if visit.saved:
        raise SessionStateError("This saved run holds only its prefill; the lesson needs a decode step. "
                                "Press Prefill to start a live run.")
    next(decode_steps(visit.session, 1, sampling.allowed(visit.limits)))
    return True


def _page_markdown(page: LessonPage, index: int, text: str, ran: bool) -> str:
    ran_note = " *(The lesson ran decode step 1 on your prompt for this.)*" if ran else ""
    return f"**Lesson {index + 1} of {len(PAGES)}: {page.title}.** {text}{ran_note}"
