"""The events that redraw a view without running a step: another step shown, another layer, tab,
machine, what-if, lens statistic, sink threshold or sampling preview.

Attention the session did not keep is recomputed from its queries and KV cache, so the layout puts
those redraws in the model queue; a what-if or a sampling preview runs no model. A redraw of the
model queue holds the visit (`one_at_a_time`): a run's steps, which run beside that queue, do not
change the run while it is drawn.
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis.measured import Scenario
from explorer.errors import SamplingSettingsError
from explorer.figures.lens import LENS_STATS
from explorer.figures.views import VIEWS
from explorer.ui.bounds import as_shown
from explorer.ui.handlers.controls import SAMPLING_FIELDS, SamplingControls, ViewControls, scenario_from
from explorer.ui.handlers.outputs import close_question, shown_view
from explorer.ui.handlers.turns import one_at_a_time
from explorer.ui.plain import info_text
from explorer.ui.status import generated_text, status_text, strip_html
from explorer.ui.toasts import shows_errors, toast_text
from explorer.ui.views import Visit, render


def is_open(visit: Visit | None) -> bool:
    """Whether the page holds a session not yet freed (a freed session keeps no traces)."""
    return visit is not None and visit.open


@shows_errors
@one_at_a_time
def on_view_change(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
                   shown: str, presenter: bool = False, zoom: int | None = None, what_if: Scenario | None = None):
    """Redraw the view on screen for other view controls. Returns one figure or `gr.skip()` per view."""
    if not is_open(visit):
        return tuple(gr.skip() for _ in VIEWS)
    view = ViewControls(layer, average_heads, hardware, shown, presenter, zoom, what_if)
    figures = shown_view(visit, view.options(visit, step), shown)
    return tuple(figures.get(name, gr.skip()) for name in VIEWS)


@shows_errors
@one_at_a_time
def on_step_change(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
                   shown: str, presenter: bool = False, zoom: int | None = None, what_if: Scenario | None = None):
    """Go to another step: its status line, the token strip and the generated text as they were after
    it, the view on screen redrawn (and no question left open on where to go on from)."""
    if not is_open(visit):
        return tuple(gr.skip() for _ in range(4 + len(VIEWS)))
    options = ViewControls(layer, average_heads, hardware, shown, presenter, zoom, what_if).options(visit, step)
    visit.viewing = options.step if options.step < len(visit.run.steps) - 1 else None
    figures = shown_view(visit, options, shown)
    return (status_text(visit, options.step), strip_html(visit, options.step), generated_text(visit, options.step),
            close_question(visit), *(figures.get(name, gr.skip()) for name in VIEWS))


def on_tab_select(view: str):
    """The handler of a view's tab: remember it as the view on screen and draw it."""

    @shows_errors
    @one_at_a_time
    def select(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
               presenter: bool = False, zoom: int | None = None, what_if: Scenario | None = None):
        if not is_open(visit):
            return view, gr.skip()
        controls = ViewControls(layer, average_heads, hardware, view, presenter, zoom, what_if)
        return view, render(visit, controls.options(visit, step), view)

    return select


@shows_errors
def on_hardware_change(visit: Visit | None, step: int | None, hardware: str, presenter: bool = False,
                       what_if: Scenario | None = None):
    """Redraw the roofline on another machine."""
    if not is_open(visit):
        return gr.skip()
    view = ViewControls(hardware=hardware, presenter=presenter, what_if=what_if)
    return render(visit, view.options(visit, step), "roofline")


@shows_errors
def on_lens_stat_change(visit: Visit | None, stat: str, step: int | None, presenter: bool = False):
    """Colour the logit lens by another statistic (`LENS_STATS`), kept for the visit's later redraws."""
    if not is_open(visit) or stat not in LENS_STATS:
        return gr.skip()
    visit.lens_stat = stat
    return render(visit, ViewControls(presenter=presenter).options(visit, step), "lens")


@shows_errors
@one_at_a_time
def on_sink_threshold_change(visit: Visit | None, threshold: float | None, step: int | None, layer: int,
                             average_heads: bool, presenter: bool = False, zoom: int | None = None):
    """Mark as sinks the heads whose first token's importance exceeds another threshold (0..1), kept for
    the visit's later redraws; redraws the attention view."""
    if not is_open(visit) or threshold is None:
        return gr.skip()
    visit.sink_threshold = min(1.0, max(0.0, float(threshold)))
    view = ViewControls(layer, average_heads, presenter=presenter, zoom=zoom)
    return render(visit, view.options(visit, step), "attention")


@shows_errors
def on_what_if_change(visit: Visit | None, step: int | None, hardware: str, presenter: bool, *values):
    """Redraw the roofline for the what-if controls' `values` (`WHAT_IF_FIELDS` order; an empty box
    or "as run" keeps the step's own value); the model is not run. Returns (the scenario, for the
    page's later redraws, and the roofline)."""
    scenario = scenario_from(*values)
    if not is_open(visit):
        return scenario, gr.skip()
    view = ViewControls(hardware=hardware, presenter=presenter, what_if=scenario)
    return scenario, render(visit, view.options(visit, step), "roofline")


def on_sampling_change(visit: Visit | None, step: int | None, *controls):
    """Redraw the sampling view with the new settings (`controls`: the seven sampling values, then
    optionally the presenter flag) applied to the shown step's stored logits."""
    if not is_open(visit):
        return gr.skip()
    count = len(SAMPLING_FIELDS)
    presenter = bool(controls[count:] and controls[-1])
    try:
        settings = SamplingControls(*controls[:count]).settings()
    except SamplingSettingsError as exc:
        gr.Warning(toast_text(str(exc)))
        return gr.skip()
    return render(visit, ViewControls(presenter=presenter).options(visit, step), "sampling", preview=settings)


def on_sampling_keystroke(components: tuple, visit: Visit | None, step: int | None, *raw):
    """`on_sampling_change` for values not preprocessed (`raw`: the sampling values as the page sent
    them, then the presenter flag): each read as its box shows it (`as_shown`: clipped to its range),
    nothing drawn while a box is empty."""
    controls = [as_shown(component, value) for component, value in zip(components, raw, strict=False)]
    if any(value is None for value in controls):
        return gr.skip()
    return on_sampling_change(visit, step, *controls, *raw[len(components):])


def model_info(visit: Visit | None):
    """The model menu's line under its label: what the page's session runs (after a prefill)."""
    return gr.skip() if visit is None else gr.update(info=f"In use: {info_text(visit.run.description)}")
