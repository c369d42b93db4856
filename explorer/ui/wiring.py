"""The app's wiring: each component's events to their handlers, by name (`explorer.ui.layout`
builds the components into a dict by name; the handlers' typed controls name their inputs:
`explorer.ui.handlers.controls`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import gradio as gr

from explorer.figures.views import VIEWS
from explorer.ui import handlers, lesson
from explorer.ui.api import API
from explorer.ui.api_events import add_endpoint, api_outputs, step_numbers
from explorer.ui.bounds import refuse_out_of_range
from explorer.ui.handlers import (
    PROMPT_INPUTS,
    SAMPLING_FIELDS,
    STEP_OUTPUT_NAMES,
    VIEW_INPUTS,
    WHAT_IF_FIELDS,
    ServedHandlers,
)
from explorer.ui.links import LINK_FIELDS
from explorer.ui.startup import PendingModel, on_model_ready

MODEL_QUEUE = "model"  # every event that may run the model shares one queue, one event at a time...
# ...but a run of N tokens, whose steps take turns on the model with every other page's
# (`explorer.ui.handlers.turns`): runs go side by side, one per live session at most
TURNS_QUEUE = "turns"
# ...and the experiments, whose passes take turns on the model too (`explorer.runner.passes`): two at once,
# so no page's step waits behind a whole experiment and no more than two experiments' copies are held
LAB_QUEUE, LAB_AT_ONCE = "lab", 2
# The figure of the selected tab, saved by plotly.js in the browser (named after its layout.meta).
SAVE_SVG_JS = """() => {
  const figure = [...document.querySelectorAll('#views .js-plotly-plot')].find(e => e.offsetParent !== null);
  if (!figure) return;
  const meta = figure.layout.meta || {};
  window.Plotly.downloadImage(figure, {format: 'svg', filename: `explorer-${meta.view}-step-${meta.step}`});
}"""
# The page's own text follows presenter mode at once (the figures are redrawn on the server); the
# presenter flag is the third-to-last input of a view change (then the zoom and the what-if).
PRESENTER_JS = "(...values) => { document.body.classList.toggle('presenter', values[values.length - 3]); return values; }"
FILTERS = SAMPLING_FIELDS[:5]


def wire(c: dict, app: ServedHandlers, demo: gr.Blocks, pending: PendingModel | None) -> None:
    """Wire every event of the page whose components are `c` (by name); `pending`: the start-up
    model while it loads (the page then says so until it is loaded)."""
    _wire_model(c, app)
    _wire_steps(c, app)
    _wire_lecture(c, app, demo)
    _wire_views(c, app)
    _wire_lesson(c, app)
    if pending is not None:
        _wire_model_ready(c, demo, pending)
    gate_every_event(demo, app.validate_model_event)
    refuse_out_of_range(demo, ("prefill", "decode", "run"), exempt=("layer-slider",))


def gate_every_event(demo: gr.Blocks, validator) -> None:
    """Give every event that may wait in Gradio's queue a validator (`validator` where it has none),
    so the page's cap of queued events counts each of them (`explorer.ui.hosting.EventGate`): a step,
    a redraw, an export, a reset, a figure. Events outside the queue (`queue=False`) and those that
    never wait in it (no concurrency limit: the page's load events) are left as they are."""
    for fn in demo.fns.values():
        if fn.fn is not None and fn.queue and fn.concurrency_limit is not None and fn.validator is None:
            fn.validator = validator


def named(c: dict, names: tuple[str, ...]) -> list:
    """The components called `names`, in that order."""
    return [c[name] for name in names]


def _plots(c: dict) -> list[gr.Plot]:
    """The plots in `VIEWS` order (the handlers return one figure or `gr.skip()` per view)."""
    return [c["plots"][view] for view in VIEWS]


def _step_outputs(c: dict) -> list:
    return [*named(c, STEP_OUTPUT_NAMES), *_plots(c)]


def _wire_model(c: dict, app: ServedHandlers) -> None:
    """A model picked from the menu sets the prompt's label and the controls its tokenizer allows."""
    c["model_choice"].input(app.on_model_select, c["model_choice"],
                            named(c, ("prompt", "prompt_tokens", "use_chat_template", "system_prompt",
                                       "enable_thinking")),
                            api_visibility="private")


def _wire_steps(c: dict, app: ServedHandlers) -> None:
    """Prefill, Next token, Run N and Reset: each runs the model (one queue) and redraws the view on screen."""
    # Progress (and an error's mark) on the status line only: the views stay readable meanwhile.
    # The validator runs as the page sends the event, before it is queued (the page's lease, its events' cap).
    model_run = {"concurrency_id": MODEL_QUEUE, "show_progress_on": [c["status"]],
                 "validator": app.validate_step}
    in_turns = model_run | {"concurrency_id": TURNS_QUEUE, "concurrency_limit": app.served.limits.max_sessions}
    outputs, views, sampling = _step_outputs(c), named(c, VIEW_INPUTS), named(c, SAMPLING_FIELDS)
    step_event = functools.partial(_step_event, outputs=outputs, api_outputs=api_outputs(outputs, step_numbers()))
    run = step_event(c["run_btn"].click, handlers.on_run_click, [c["visit"], c["run_count"], *sampling, *views], "run",
                     trigger_mode="always_last", **in_turns)
    # a new prefill or a reset stops a run of N tokens after the step in flight (the steps taken are kept); a
    # cancel of its own, as an event that waits in the model queue behind the run would cancel nothing
    for button in (c["prefill_btn"], c["reset_yes"]):
        button.click(None, cancels=[run])
    # the prefill's progress also shows where its figure will appear (the empty view before the first one)
    prefill = step_event(c["prefill_btn"].click, app.on_prefill_click, [*named(c, PROMPT_INPUTS), *sampling, *views],
                         "prefill", trigger_mode="always_last",
                         **model_run | {"validator": app.validate_prefill, "show_progress_on": [c["status"], *_plots(c)]})
    prefill.success(handlers.model_info, c["visit"], c["model_choice"], api_visibility="private", show_progress="hidden")
    # every click on Next token is one step, run in order, even while the previous one runs
    step_event(c["decode_btn"].click, handlers.on_decode_click, [c["visit"], *sampling, *views], "decode",
               trigger_mode="multiple", **model_run)
    for button, handler in ((c["branch_btn"], handlers.on_branch_click), (c["latest_btn"], handlers.on_latest_click)):
        button.click(handler, [c["visit"], *sampling, *views], outputs, api_visibility="private", **in_turns)
    # Reset asks first (nothing runs until it is confirmed); R on the keyboard presses Reset
    c["reset_btn"].click(lambda: gr.update(visible=True), None, c["confirm_reset"], queue=False,
                         api_visibility="private", show_progress="hidden")
    c["reset_no"].click(lambda: gr.update(visible=False), None, c["confirm_reset"], queue=False,
                        api_visibility="private", show_progress="hidden")
    reset = step_event(c["reset_yes"].click, app.on_reset_click, None, "reset")
    # the session the exports came from is gone (their files deleted): the download buttons go with it
    for event in (prefill, reset):
        event.success(handlers.no_export, None, named(c, ("export_file", "html_file")), queue=False,
                      api_visibility="private", show_progress="hidden")


def _step_event(trigger: Callable, handler: Callable, inputs: list | None, api_name: str, outputs: list,
                api_outputs: list, **event) -> gr.events.Dependency:
    """The page's event of `trigger` (private), and its twin, the API's endpoint `api_name`, in the same
    queue with the same validator, its outputs plain values (`explorer.ui.api_events`)."""
    dependency = trigger(handler, inputs, outputs, api_visibility="private", **event)
    queue = {key: value for key, value in event.items() if key in ("concurrency_id", "concurrency_limit", "validator")}
    add_endpoint(handler, inputs, api_outputs, api_name=api_name, api_description=API[api_name], **queue)
    return dependency


def _wire_lecture(c: dict, app: ServedHandlers, demo: gr.Blocks) -> None:
    """Share links, export and import of runs, and freeing a closed page's session."""
    link_controls = named(c, LINK_FIELDS)
    c["share_btn"].click(handlers.on_share_click, link_controls, c["share_box"], api_visibility="private").then(
        None, c["share_box"], c["share_box"], js="(query) => window.location.origin + window.location.pathname + query")
    demo.load(app.on_page_load, None, [*link_controls, c["prefill_btn"]], api_visibility="private",
              concurrency_limit=None)  # fast, and every page waits for it
    demo.unload(app.on_page_close)
    c["lease"].tick(app.on_lease_tick, c["visit"], c["status"], queue=False, show_progress="hidden",
                    api_visibility="private")
    c["svg_btn"].click(None, js=SAVE_SVG_JS)
    # each export is written, then its download button shows it with the file's name and size
    # not preprocessed: a gr.DownloadButton's preprocess leaves an empty temporary file behind (Gradio 6.31)
    shown = {"queue": False, "api_visibility": "private", "show_progress": "hidden", "preprocess": False}
    c["export_btn"].click(handlers.on_export_click, c["visit"], c["export_file"], api_name="export",
                          api_description=API["export"]).success(handlers.show_download, c["export_file"],
                                                                 c["export_file"], **shown)
    # the view drawn again may recompute attention: the model queue
    c["html_btn"].click(handlers.on_view_html_click, [*named(c, ("visit", "step", "layer", "average_heads", "hardware",
                                                                  "shown", "presenter", "zoom", "what_if")),
                                                      *named(c, SAMPLING_FIELDS)], c["html_file"],
                        concurrency_id=MODEL_QUEUE, validator=app.validate_model_event,
                        api_visibility="private").success(handlers.show_download, c["html_file"], c["html_file"],
                                                          **shown)
    # the button gives the export's size after each step (or a loaded run); cheap, so not queued
    c["status"].change(handlers.on_export_label, c["visit"], c["export_btn"], queue=False, show_progress="hidden",
                       api_visibility="private")
    c["import_file"].upload(app.on_import_upload, [c["import_file"], *named(c, VIEW_INPUTS)],
                            [*_step_outputs(c), *named(c, handlers.RESTORED_INPUTS)], concurrency_id=MODEL_QUEUE,
                            validator=app.validate_model_event, api_visibility="private",
                            preprocess=False)  # gr.File's preprocess leaves an empty temporary file behind


def _wire_lesson(c: dict, app: ServedHandlers) -> None:
    """The lesson's buttons: each page may run a decode step (the model queue) and draws its view."""
    inputs = [c["visit"], c["lesson_page"], c["lesson_before"], *named(c, SAMPLING_FIELDS), *named(c, VIEW_INPUTS)]
    outputs = [*_step_outputs(c), *named(c, lesson.LESSON_OUTPUTS)]
    for button, delta in ((c["lesson_btn"], 0), (c["lesson_prev"], -1), (c["lesson_next"], 1)):
        button.click(lesson.on_lesson_move(delta), inputs, outputs, concurrency_id=MODEL_QUEUE,
                     validator=app.validate_step, show_progress="minimal", api_visibility="private")
    # its end puts back what it changed and draws that view (which may recompute attention: the model queue)
    c["lesson_close"].click(lesson.on_lesson_close, [c["visit"], *inputs[2:]], outputs, concurrency_id=MODEL_QUEUE,
                            validator=app.validate_model_event, show_progress="hidden", api_visibility="private")


def _wire_model_ready(c: dict, demo: gr.Blocks, pending: PendingModel) -> None:
    """A page opened while the start-up model loads shows it loading on the status line, then the
    model's note, layer range and roofline machine once it is loaded (or why it could not be). It
    only waits, so it is in no queue: a page's steps pushed meanwhile are not held behind it, nor
    counted against the page's cap of queued model events (hosted mode)."""
    outputs = named(c, ("status", "model_choice", "layer", "hardware", "prompt", "prompt_tokens", "use_chat_template",
                         "system_prompt", "enable_thinking"))
    # no progress shown: its fading would make the status line's "Loading the model…" hard to read
    demo.load(functools.partial(on_model_ready, pending), None, outputs, concurrency_limit=None,
              show_progress="hidden", api_visibility="private")


def _wire_views(c: dict, app: ServedHandlers) -> None:
    """View controls and tabs redraw the view on screen without a step (attention may be recomputed:
    the model queue)."""
    plots = _plots(c)
    view_inputs = named(c, ("visit", "step", "layer", "average_heads", "hardware"))
    change_inputs = [*view_inputs, c["shown"], c["presenter"], c["zoom"], c["what_if"]]
    model_queue = {"concurrency_id": MODEL_QUEUE, "validator": app.validate_model_event, "api_visibility": "private"}
    redraw = {**model_queue, "show_progress": "minimal"}
    c["step"].input(handlers.on_step_change, change_inputs, [*named(c, ("status", "strip", "text", "offer")), *plots],
                    **redraw)
    for control in (c["layer"], c["average_heads"], c["zoom"]):
        control.input(handlers.on_view_change, change_inputs, plots, **redraw)
    c["presenter"].change(handlers.on_view_change, change_inputs, plots, js=PRESENTER_JS, **model_queue)
    c["presenter"].change(handlers.lab_figure, [c["visit"], c["presenter"]], c["plots"]["lab"], queue=False,
                          show_progress="hidden", api_visibility="private")
    for view in VIEWS:
        c["tabs"][view].select(handlers.on_tab_select(view), [*view_inputs, c["presenter"], c["zoom"], c["what_if"]],
                               [c["shown"], c["plots"][view]], **model_queue)
    # the tab shows the run's experiment where it ran one (a saved run's too)
    c["tabs"]["equivalence"].select(handlers.on_equivalence_tab, c["visit"], c["plots"]["equivalence"],
                                    show_progress="hidden", api_visibility="private")
    lab_queue = model_queue | {"concurrency_id": LAB_QUEUE, "concurrency_limit": LAB_AT_ONCE}
    c["equivalence_btn"].click(handlers.on_equivalence_click, [c["visit"], c["equivalence_steps"]],
                               c["plots"]["equivalence"], show_progress="minimal",
                               **lab_queue | {"validator": app.validate_step})
    c["lab_select"].input(handlers.on_lab_select, c["lab_select"], [*c["lab_params"], c["lab_choice"], c["lab_text"]],
                          queue=False, show_progress="hidden", api_visibility="private")
    # the experiment's setup folds away once it ran, so its lesson text rises beside the figure
    c["lab_btn"].click(handlers.on_lab_click, [c["visit"], c["lab_select"], *c["lab_params"], c["lab_choice"],
                                               c["presenter"]],
                       [c["plots"]["lab"], c["lab_text"]], show_progress="minimal",
                       **lab_queue | {"validator": app.validate_step}).success(
        lambda: gr.update(open=False), None, c["lab_setup"], queue=False, show_progress="hidden",
        api_visibility="private")
    # the lab for API clients: a parameter left out is None, the experiment's default (the page's boxes
    # hold the first experiment's defaults, which a client naming another would get otherwise)
    gr.api(evaluated(app.on_lab_call), api_name="lab", api_description=API["lab"], concurrency_id=LAB_QUEUE,
           concurrency_limit=LAB_AT_ONCE)
    c["lens_stat"].input(handlers.on_lens_stat_change, named(c, ("visit", "lens_stat", "step", "presenter")),
                         c["plots"]["lens"], show_progress="hidden", api_visibility="private")
    c["sink"].change(handlers.on_sink_threshold_change,
                     named(c, ("visit", "sink", "step", "layer", "average_heads", "presenter", "zoom")),
                     c["plots"]["attention"], show_progress="hidden", **model_queue)
    c["hardware"].input(handlers.on_hardware_change, named(c, ("visit", "step", "hardware", "presenter", "what_if")),
                        c["plots"]["roofline"], api_visibility="private")
    # a what-if redraws the roofline from the cost model alone: no model run, so not in the model queue
    what_if_inputs = [*named(c, ("visit", "step", "hardware", "presenter")), *named(c, WHAT_IF_FIELDS)]
    for name in WHAT_IF_FIELDS:
        c[name].change(handlers.on_what_if_change, what_if_inputs, [c["what_if"], c["plots"]["roofline"]],
                       show_progress="hidden", api_visibility="private")
    sampling_inputs = [c["visit"], c["step"], *named(c, SAMPLING_FIELDS), c["presenter"]]
    # a filter's box sends every keystroke, an empty box as None and a value past its range as typed: the
    # preview is not preprocessed (no keystroke refused), it reads each value as the box shows it
    shown = functools.partial(handlers.on_sampling_keystroke, tuple(named(c, SAMPLING_FIELDS)))
    for name in FILTERS:
        c[name].input(shown, sampling_inputs, c["plots"]["sampling"], preprocess=False, api_visibility="private")
    # any view's figure for API clients (gradio_client), whose pages have no tabs (attention may be recomputed)
    gr.api(evaluated(app.on_figure_call), api_name="figure", api_description=API["figure"], concurrency_id=MODEL_QUEUE)


def evaluated(method: Callable) -> Callable:
    """`method` with its annotations evaluated: `gr.api` reads the return type from the signature as
    written, which `from __future__ import annotations` leaves as text (typed Any in the API)."""

    @functools.wraps(method)
    def call(*args, **kwargs):
        return method(*args, **kwargs)

    call.__signature__ = inspect.signature(method, eval_str=True)
    return call
