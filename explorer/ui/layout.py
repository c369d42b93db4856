"""The app's layout and wiring: components, then `event(handler, inputs, outputs)`.

Every control and figure has a stable `elem_id` (listed in the README) for people who write
their own UI tests.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from typing import TYPE_CHECKING

import gradio as gr
from starlette.middleware import Middleware

from explorer.analysis.hardware import THIS_MACHINE, get_hardware, hardware_names, link_names
from explorer.analysis.measured import Scenario
from explorer.analysis.precision import DTYPE_BITS
from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD
from explorer.config import SamplingSettings
from explorer.figures.attention import ZOOM_TOKENS
from explorer.figures.lens import LENS_STATS
from explorer.figures.theme import empty_figure
from explorer.figures.views import VIEW_TABLE, VIEWS
from explorer.lab.table import LAB
from explorer.runner.prompts import max_prompt_chars
from explorer.ui import handlers
from explorer.ui.export import remove_leftovers, size_text
from explorer.ui.handlers import (
    ServedHandlers,
)
from explorer.ui.handlers.controls import AS_RUN, MAX_WHAT_IF_BATCH
from explorer.ui.hosting import LOCAL, EventGate, Limits, Served, page_state_dropper, queued_events
from explorer.ui.links import RANGES
from explorer.ui.live import LEASE_RENEWALS
from explorer.ui.models import ModelRegistry
from explorer.ui.startup import LOADING_STATUS, ModelFacts, PendingModel, prompt_label
from explorer.ui.static import asset_text
from explorer.ui.uploads import UploadBudget
from explorer.ui.wiring import named, wire

if TYPE_CHECKING:
    from explorer.runner.loading import LoadedModel

# Gradio drops a page's state (its Visit) an hour after its last event; the session's memory is freed
# sooner, when its page closes or its lease runs out (live.LiveSessions).
SESSION_TTL_S = 3600
GRADIO_THREADS = 40  # Gradio's (and Starlette's) default worker threads
# Gradio deletes the files this app put in its cache (uploads, exports) once an hour old, looking every
# 10 minutes, and all of them when the app stops: (frequency_s, age_s).
DELETE_CACHE = (600, SESSION_TTL_S)
# The app starts in sampling mode so the sampling view has filters to show; the seed makes it repeatable.
APP_SAMPLING = SamplingSettings(do_sample=True, temperature=0.8, top_k=50, top_p=0.9, min_p=0.0)
VIEW_TITLES = {view.name: view.title for view in VIEW_TABLE.values()}
# each view's plot: "<view>-plot", but the KV cache's keeps the id people's own UI tests know
PLOT_IDS = {view: f"{view}-plot" for view in VIEWS} | {"kv_cache": "kv-plot"}
SHORTCUTS = ("Keys (outside text fields): **N** next token · **P** prefill · **R** reset (R again: yes) · "
             "**1-7** switch views (**8** the experiment, **9** the lab) · **F** full screen · **S** these settings · **L** the lesson (its pages: "
             "← →, PageUp, PageDown)")
TITLE = ("**LLM Inference Explorer** · a prompt, its **prefill**, then one **decode** step at a time · "
         "**Lesson** (key **L**): a tour of your run · "
         '<span class="hint">model, sampling, examples, presenter mode: the settings at the left (key **S**)</span>')
THIS_MACHINE_LABEL = "This machine (measured)"
# the what-if counts' menus: a few sizes, and any count typed
WHAT_IF_COUNTS = {"wi_batch": ("batch B", "what-if-batch", (1, 8, 64, 256, MAX_WHAT_IF_BATCH)),
                  "wi_context": ("decode n", "what-if-context", (256, 1024, 4096, 8192)),
                  "wi_tokens": ("prefill T", "what-if-tokens", (128, 512, 2048, 8192)),
                  "wi_tp": ("tensor-parallel R", "what-if-tp", (2, 3, 4, 8))}
EXAMPLE_FIELDS = ("prompt", "do_sample", "temperature", "top_k", "top_p", "min_p", "seed")


@functools.cache
def examples() -> tuple[dict, ...]:
    """The ready examples shipped in assets/examples.json: label, prompt and sampling settings (read once)."""
    return tuple(json.loads(asset_text("examples.json")))


def hardware_menu() -> list[tuple[str, str]]:
    """The roofline's machines as (the name shown, the catalogue key): the catalogue's names, then
    this machine's rates as the start-up probe measured them."""
    return [(THIS_MACHINE_LABEL if key == THIS_MACHINE else get_hardware(key).name, key) for key in hardware_names()]


def launch_options(limits: Limits = LOCAL) -> dict:
    """Keyword arguments for `Blocks.launch`: the stylesheet, the keyboard shortcuts, no SSR (Node
    24+ would be needed), no run history kept in the browser, Gradio's own per-page records
    bounded (about 0.5 MB each; it keeps 10,000 by default), uploads capped at
    `limits.max_upload_bytes` (Gradio stops reading a larger one and deletes what it wrote), and a
    worker thread for each live session's run waiting its turn on the model besides Gradio's 40; in a
    hosted app, the bytes one address holds in uploads bounded as they arrive (`UploadBudget`).
    The footer links to the API page and Gradio, not to Gradio's settings, whose Light/Dark choice
    the app does not follow (its figures are drawn on white; assets/shortcuts.js keeps the page light)."""
    options = {"css": asset_text("app.css"),
               "head": asset_text("shortcuts.js"),
               "ssr_mode": False, "run_history": False, "footer_links": ["api", "gradio"],
               "state_session_capacity": 10 * limits.max_sessions,
               "max_file_size": limits.max_upload_bytes, "max_threads": GRADIO_THREADS + limits.max_sessions}
    if limits.max_upload_bytes_per_address is not None:
        budget = Middleware(UploadBudget, most_bytes=limits.max_upload_bytes_per_address, proxy_hops=limits.proxy_hops)
        options["app_kwargs"] = {"middleware": [budget]}
    return options


def build_demo(loaded: LoadedModel | PendingModel, device: str = "cpu", limits: Limits = LOCAL) -> gr.Blocks:
    """The Gradio app; `loaded` is the start-up model, shared read-only by every visitor, other
    models picked in the app are loaded on `device`, and `limits` bound what a visitor may ask.

    `loaded` may be still loading (a `PendingModel`, as `python app.py` serves the page before the
    model is loaded): the page then says so on its status line until the model is loaded (or says
    why it could not be), and every event that runs the model waits for it.
    """
    served = Served.create(ModelRegistry(loaded, device, limits.allowed_models), limits)
    facts = served.registry.facts
    app = ServedHandlers(served)
    remove_leftovers()
    c: dict = {}  # the components by name (the handlers name their inputs), for the wiring below
    with gr.Blocks(title="LLM Inference Explorer", delete_cache=DELETE_CACHE) as demo:
        c["visit"] = gr.State(None, time_to_live=SESSION_TTL_S, delete_callback=app.expiry_callback())
        # ticks only in an open page: each tick renews the page's session lease (live.LiveSessions)
        c["lease"] = gr.Timer(limits.session_lease_s / LEASE_RENEWALS)
        c["shown"] = gr.State(VIEWS[0])  # the view whose tab is selected: the only one drawn per step
        # What is set once per lecture waits in the sidebar (closed: the figure gets the screen); the
        # main column keeps what each step needs, so the prompt, the buttons and the figure share a screen.
        c["prompt"] = _prompt_box(app)  # rendered in the main column; the examples in the sidebar fill it
        with gr.Sidebar(label="Settings", open=False, width=380, elem_id="settings"):
            gr.Markdown("### Settings", elem_id="settings-title")
            c |= _model_controls(app, facts) | _sampling_controls(limits)
            _examples(c)
            c |= _view_settings(facts) | _what_if_controls()
            _lecture_tools(c, limits)
            gr.Markdown(SHORTCUTS, elem_id="shortcuts")
        gr.Markdown(TITLE, elem_id="title")
        with gr.Row(elem_id="prompt-row"):
            c["prompt"].render()
            c |= _step_buttons(limits)
        # the status line quotes a saved run's description and token text (escaped, explorer.ui.plain): no
        # LaTeX, whose $$ delimiters KaTeX would find again in the rendered text
        c["status"] = gr.Markdown(LOADING_STATUS if isinstance(loaded, PendingModel) else "", elem_id="status",
                                  latex_delimiters=[], label="Status line (Markdown)")
        c |= _questions()
        c["strip"] = gr.HTML(elem_id="token-strip", label="Token strip (HTML)")
        c |= _step_row(facts)
        c["what_if"] = gr.State(Scenario())  # the roofline's what-if, for every redraw of it
        c |= _lesson_panel()
        c["tabs_selected"], c["tabs"], c["plots"], experiment = _view_tabs()  # the tabs, each tab and plot by view
        c |= experiment
        wire(c, app, demo, loaded if isinstance(loaded, PendingModel) else None)
    demo.queue(max_size=limits.queue_size)
    if limits.max_pending_events is not None:
        served.events = EventGate(limits.max_pending_events, queued_events(demo))
    served.drop_page_state = page_state_dropper(demo)
    return demo


def _step_buttons(limits: Limits) -> dict[str, gr.components.Component]:
    """Prefill, Next token, Reset, Run N tokens and Lesson: one row beside the prompt."""
    with gr.Column(scale=5, min_width=640, elem_id="step-buttons"), gr.Row(elem_classes="button-row"):
        # enabled by the page's load event once a link's settings are in the controls: a Prefill
        # clicked before them would run without them
        prefill = gr.Button("Prefill", variant="primary", elem_id="prefill-btn", min_width=90, interactive=False)
        decode = gr.Button("Next token", elem_id="decode-btn", min_width=110)
        reset = gr.Button("Reset", variant="stop", elem_id="reset-btn", min_width=70)
        count = gr.Number(8, label="N", precision=0, minimum=1, maximum=limits.max_run_tokens,
                          elem_id="run-count", min_width=100, scale=0)
        run = gr.Button("Run N tokens", elem_id="run-btn", min_width=120)
        lesson = gr.Button("Lesson", elem_id="lesson-btn", min_width=80)
    return {"prefill_btn": prefill, "decode_btn": decode, "reset_btn": reset, "run_count": count, "run_btn": run,
            "lesson_btn": lesson}


def _step_row(facts: ModelFacts) -> dict[str, gr.components.Component]:
    """The step shown, the layer and the generated text, above the views."""
    with gr.Row(elem_id="step-row"):
        step = gr.Dropdown([], label="Step shown", elem_id="step-select", interactive=True, scale=1, min_width=200)
        # its range once the start-up model is loaded (a placeholder, not movable, until then)
        layer = gr.Slider(0, (facts.num_layers or 2) - 1, 0, step=1, precision=0, label="Layer", elem_id="layer-slider", scale=1,
                          min_width=200, interactive=facts.num_layers is not None)
        text = gr.Textbox(label="Generated text", interactive=False, elem_id="generated-text", lines=1, max_lines=3,
                          scale=3, min_width=240)
    return {"step": step, "layer": layer, "text": text}


def _examples(c: dict) -> None:
    """The ready examples: each fills the prompt and the sampling settings (assets/examples.json)."""
    gr.Examples([[example[field] for field in EXAMPLE_FIELDS] for example in examples()], named(c, EXAMPLE_FIELDS),
                label="Ready examples (they fill the prompt and the sampling settings)",
                example_labels=[example["label"] for example in examples()], api_visibility="private")


def _prompt_box(app: ServedHandlers) -> gr.Textbox:
    """The prompt (its label says when the start-up model reads no text)."""
    registry = app.served.registry
    return gr.Textbox(examples()[0]["prompt"], label=prompt_label(registry.takes_text(registry.default_choice)),
                      elem_id="prompt-box", lines=2, max_lines=6, scale=4, min_width=320, render=False,
                      max_length=max_prompt_chars(app.served.limits.max_prompt_tokens))  # typing and pasting stop there


def _model_controls(app: ServedHandlers, facts: ModelFacts) -> dict[str, gr.components.Component]:
    """Model choice and chat template, by name (`PROMPT_INPUTS`, all but the prompt)."""
    registry = app.served.registry
    text = registry.takes_text(registry.default_choice)
    most_chars = max_prompt_chars(app.served.limits.max_prompt_tokens)  # the page stops typing and pasting there
    model_select = gr.Dropdown(registry.choices(), value=registry.default_choice, label="Model",
                               info=facts.description, elem_id="model-select")
    custom_model = gr.Textbox(label="Or any causal LM: hub id or local folder", elem_id="custom-model",
                              placeholder="e.g. Qwen/Qwen3-0.6B or /path/to/model")
    prompt_tokens = gr.Number(17, label="Prompt length in tokens (shape-only models without a tokenizer)",
                              precision=0, minimum=1, elem_id="prompt-tokens", visible=not text)
    chat_template = gr.Checkbox(True, label="Use the chat template", elem_id="chat-template", visible=text)
    thinking = gr.Checkbox(False, label="Thinking (Qwen3's enable_thinking)",
                           elem_id="enable-thinking", visible=text)
    system_prompt = gr.Textbox(label="System prompt (optional, chat template only)", elem_id="system-prompt",
                               visible=text, max_length=most_chars)
    batch_lines = gr.Checkbox(False, label="A batch: one prompt per line (up to 8, left-padded; the views show "
                              "the first)", elem_id="batch-lines")
    lm_head_all = gr.Checkbox(False, label="LM head over every position ([B, T, V] logits; generate takes the "
                              "last only)", elem_id="lm-head-all")
    return {"model_choice": model_select, "custom_model": custom_model, "prompt_tokens": prompt_tokens,
            "use_chat_template": chat_template, "system_prompt": system_prompt, "enable_thinking": thinking,
            "batch_lines": batch_lines, "lm_head_all": lm_head_all}


def _view_settings(facts: ModelFacts) -> dict[str, gr.components.Component]:
    """The view controls not needed at every step: heads averaged, attention zoom, roofline machine, presenter."""
    with gr.Accordion("Views: attention, roofline, presenter mode", open=True, elem_id="view-settings"):
        average = gr.Checkbox(False, label="Attention: average over heads", elem_id="average-heads")
        zoom = gr.Number(None, label=f"Attention: zoom to {ZOOM_TOKENS} tokens from token", precision=0, minimum=0,
                         placeholder="empty: the whole matrix", elem_id="attention-zoom")
        hardware = gr.Dropdown(hardware_menu(), value=facts.hardware, label="Roofline hardware", elem_id="hardware-select")
        sink = gr.Number(DEFAULT_SINK_THRESHOLD, label="Attention: a sink puts a mean weight over this on token 0",
                         minimum=0, maximum=1, step=0.05, elem_id="sink-threshold")
        lens_stat = gr.Radio([(label, key) for key, (label, _) in LENS_STATS.items()], value="top1",
                             label="Logit lens: colour by", elem_id="lens-stat")
        presenter = gr.Checkbox(False, label="Presenter mode (projector)", elem_id="presenter-mode")
    return {"average_heads": average, "zoom": zoom, "hardware": hardware, "lens_stat": lens_stat, "sink": sink,
            "presenter": presenter}


def _lecture_tools(c: dict, limits: Limits) -> None:
    """Share a link, save the view as SVG or HTML, export and load runs (in an accordion, `lecture-tools`)."""
    with gr.Accordion("Share a link, export the run, load a saved run", open=False, elem_id="lecture-tools"):
        c["share_btn"] = gr.Button("Share link", elem_id="share-btn", size="sm")
        c["share_box"] = gr.Textbox(show_label=False, placeholder="a link to this prompt, model and settings",
                                    elem_id="share-link", buttons=["copy"])
        c["svg_btn"] = gr.Button("Save the view on screen as SVG", elem_id="svg-btn", size="sm")
        gr.Markdown("PNG: the camera button above each figure.")
        # each export is written on the server, then offered by its download button (hidden until then)
        c["html_btn"] = gr.Button("Export the view on screen as HTML (opens offline, for slides)", elem_id="html-btn",
                                  size="sm")
        c["html_file"] = gr.DownloadButton("Download the view", elem_id="html-file", size="sm", visible=False)
        c["export_btn"] = gr.Button("Export run (JSON)", elem_id="export-btn", size="sm")
        c["export_file"] = gr.DownloadButton("Download the run", elem_id="export-file", size="sm", visible=False)
        c["import_file"] = gr.File(label="Load a saved run (no model needed)", file_types=[".json"],
                                   elem_id="import-file", type="filepath", height=120)
        if limits.max_export_bytes is not None:
            gr.Markdown(f"Here an export is at most {size_text(limits.max_export_bytes)}: a larger run is "
                        "exported without its attention (the file says so), and one too large even then "
                        "is refused. The button gives the size.", elem_id="export-note")


def _sampling_controls(limits: Limits) -> dict[str, gr.components.Component]:
    """The sampling controls, by name (`SAMPLING_FIELDS`)."""
    s = replace(APP_SAMPLING, max_new_tokens=min(APP_SAMPLING.max_new_tokens, limits.max_new_tokens))
    with gr.Accordion("Sampling: greedy or sample, temperature, top-k, top-p, min-p, seed", open=False,
                      elem_id="sampling-settings"):
        with gr.Row():
            sample_box = gr.Checkbox(s.do_sample, label="Sample (off: greedy)", elem_id="do-sample")
            seed_box = gr.Number(s.seed, label="Seed", precision=0, minimum=RANGES["seed"][0],
                                 maximum=RANGES["seed"][1], elem_id="seed")
            max_new_box = gr.Number(s.max_new_tokens, label="Max new tokens", precision=0, minimum=1,
                                    maximum=limits.max_new_tokens, elem_id="max-new-tokens")
        with gr.Row():
            temperature = gr.Slider(*RANGES["temperature"], s.temperature, step=0.05, label="Temperature",
                                    elem_id="temperature")
            top_k = gr.Slider(*RANGES["top_k"], s.top_k, step=1, precision=0, label="Top-k", info="0: off", elem_id="top-k")
            top_p = gr.Slider(*RANGES["top_p"], s.top_p, step=0.01, label="Top-p", info="1: off", elem_id="top-p")
            min_p = gr.Slider(*RANGES["min_p"], s.min_p, step=0.01, label="Min-p", info="0: off", elem_id="min-p")
    return {"do_sample": sample_box, "temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p,
            "seed": seed_box, "max_new_tokens": max_new_box}


def _questions() -> dict[str, gr.components.Component]:
    """The two questions the page asks before it drops steps (hidden until then; the status line says
    what each answer does): where to go on from, at an earlier step, and whether to reset."""
    with gr.Row(visible=False, elem_id="branch-offer") as offer:
        branch = gr.Button("Continue from the step shown", elem_id="branch-btn", variant="primary", size="sm")
        latest = gr.Button("Go on from the latest", elem_id="latest-btn", size="sm")
    with gr.Row(visible=False, elem_id="reset-confirm") as confirm:
        gr.Markdown("**Reset:** forget this run (its steps, cache and views)?", elem_id="reset-question")
        reset = gr.Button("Reset", variant="stop", elem_id="reset-yes", size="sm")
        keep = gr.Button("Keep it", elem_id="reset-no", size="sm")
    return {"offer": offer, "branch_btn": branch, "latest_btn": latest, "confirm_reset": confirm,
            "reset_yes": reset, "reset_no": keep}


def _lesson_panel() -> dict[str, gr.components.Component]:
    """The guided lesson (hidden until the Lesson button or the key L opens it): a page's sentences,
    then Previous, Next and End (the arrow keys and a presenter's clicker, PageUp and PageDown, too)."""
    with gr.Row(visible=False, elem_id="lesson") as panel:
        text = gr.Markdown(elem_id="lesson-text", latex_delimiters=[])
        with gr.Column(scale=0, min_width=210, elem_id="lesson-buttons"):
            previous = gr.Button("◀ Previous", elem_id="lesson-prev", size="sm")
            following = gr.Button("Next ▶", elem_id="lesson-next", size="sm", variant="primary")
            close = gr.Button("End lesson", elem_id="lesson-close", size="sm")
    return {"lesson_panel": panel, "lesson_text": text, "lesson_prev": previous, "lesson_next": following,
            "lesson_close": close, "lesson_page": gr.State(None), "lesson_before": gr.State(None)}


def _view_tabs() -> tuple[gr.Tabs, dict[str, gr.Tab], dict[str, gr.Plot], dict[str, gr.components.Component]]:
    """One tab per view, each with its Plotly figure and a "Full screen" button in the plot's tool bar
    (the browser's full screen for the views, the figure fitted to it: `explorerFullscreen` in
    assets/shortcuts.js), then the "equivalent is not identical" experiment's tab (no view of the run:
    its button runs the model); returns the tabs and the plots by view (and "equivalence"), and the
    experiment's steps box and button."""
    tabs, plots = {}, {}
    # the names wrap onto a second row where a narrow page has no room for them (not into a menu)
    with gr.Tabs(elem_id="views", overflow_behavior="wrap") as container:
        for view in VIEWS:
            with gr.Tab(VIEW_TITLES[view], id=view, elem_id=f"tab-{view}") as tabs[view]:
                full_screen = gr.Button("Full screen", size="sm")
                plots[view] = gr.Plot(empty_figure(view, handlers.EMPTY_VIEW), show_label=False,
                                      label=f"{VIEW_TITLES[view]} (Plotly figure; drawn for the view on screen)",
                                      elem_id=PLOT_IDS[view], buttons=[full_screen])
                full_screen.click(None, js="() => window.explorerFullscreen()")
        with gr.Tab("Equivalent ≠ identical", id="equivalence", elem_id="tab-equivalence") as tabs["equivalence"]:
            with gr.Row(equal_height=False):  # the controls beside the figure, so its top stays on screen
                plots["equivalence"] = gr.Plot(empty_figure("equivalence", handlers.EQUIVALENCE_EMPTY),
                                               show_label=False, elem_id="equivalence-plot", scale=4)
                with gr.Column(scale=1, min_width=200, elem_id="equivalence-controls"):
                    button = gr.Button("Run the experiment on this prompt", variant="primary",
                                       elem_id="equivalence-btn")
                    steps = gr.Number(4, label="greedy steps", precision=0, minimum=1,
                                      maximum=handlers.APP_EQUIVALENCE_STEPS, elem_id="equivalence-steps",
                                      info="The model is busy while it runs: seconds to a minute on a CPU.")
        with gr.Tab("Lab", id="lab", elem_id="tab-lab") as tabs["lab"]:
            plots["lab"], lab = _lab_panel()
    return container, tabs, plots, {"equivalence_steps": steps, "equivalence_btn": button, **lab}


def _lab_panel() -> tuple[gr.Plot, dict[str, gr.components.Component]]:
    """The lab: an inference engine's trick run on the prompt (`explorer.lab.table.LAB`): its figure,
    and beside it the experiment's menu, button and parameters (two a row), folded away once it ran so
    its lesson text, under them, rises beside the figure."""
    first = next(iter(LAB.values()))
    with gr.Row(equal_height=False):
        plot = gr.Plot(empty_figure("lab", handlers.LAB_EMPTY), show_label=False, elem_id="lab-plot", scale=3,
                       label="The experiment's figure (Plotly)")
        with gr.Column(scale=1, min_width=300, elem_id="lab-controls"):
            with gr.Accordion("Experiment and its parameters", open=True, elem_id="lab-setup") as setup:
                menu = gr.Dropdown([(e.title, e.name) for e in LAB.values()], value=first.name, label="Experiment",
                                   elem_id="lab-select")
                # the button before the parameters: on a 720-pixel screen it is in sight, the defaults set
                button = gr.Button("Run the experiment", variant="primary", elem_id="lab-btn")
                boxes = []
                for row in range(0, handlers.LAB_PARAM_SLOTS, 2):
                    with gr.Row():
                        boxes += [gr.Number(elem_id=f"lab-param-{slot}", precision=0, min_width=120,
                                            **handlers.lab_param_box(first, slot)) for slot in (row, row + 1)]
                # any name reaches the handler, which reads it as the experiment's parameter (an API client sends one)
                menu_box = gr.Dropdown(elem_id="lab-choice", allow_custom_value=True, **handlers.lab_menu(first))
            text = gr.Markdown(first.what, elem_id="lab-text", latex_delimiters=[], label="Its lesson (Markdown)")
    return plot, {"lab_select": menu, "lab_params": boxes, "lab_choice": menu_box, "lab_btn": button, "lab_text": text,
                  "lab_setup": setup}


def _what_if_controls() -> dict[str, gr.components.Component]:
    """The roofline's what-ifs, by name (`WHAT_IF_FIELDS`), in the settings (the figure keeps the
    screen): "as run" is the step's own."""
    formats = [AS_RUN, *DTYPE_BITS]
    with gr.Accordion("Roofline what-ifs: batch, context, formats, tensor parallelism (no model run)", open=True,
                      elem_id="what-if"):
        with gr.Row():
            # menus: "as run" reads as such (an empty number box showed 0); a count may be typed
            controls = {name: gr.Dropdown([AS_RUN, *map(str, counts)], value=AS_RUN, label=label, elem_id=elem_id,
                                          allow_custom_value=True, min_width=120, scale=1)
                        for name, (label, elem_id, counts) in WHAT_IF_COUNTS.items()}
        with gr.Row():
            for name, label in (("weights", "weights"), ("activations", "activations"), ("kv", "KV cache")):
                controls[f"wi_{name}"] = gr.Dropdown(formats, value=AS_RUN, label=label, elem_id=f"what-if-{name}",
                                                     min_width=120, scale=1)
            # the link between the ranks of the tensor-parallel R (`explorer.analysis.hardware_catalogue.LINKS`)
            controls["wi_link"] = gr.Dropdown(link_names(), value="nvlink4", label="TP link", elem_id="what-if-link",
                                              min_width=120, scale=1)
        controls["wi_merged"] = gr.Checkbox(False, label="merged q/k/v and gate/up (as engines run them)",
                                            elem_id="what-if-merged")
        controls["wi_fused"] = gr.Checkbox(False, label="fused attention (FlashAttention)", elem_id="what-if-fused")
        controls["wi_lm_head_all"] = gr.Checkbox(False, label="LM head on all positions",
                                                 elem_id="what-if-lm-head-all")
    return controls
