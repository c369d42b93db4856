"""The app's layout and wiring: components, then `event(handler, inputs, outputs)`.

Every control and figure has a stable `elem_id` (listed in the README) for people who write
their own UI tests.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import gradio as gr

from explorer.analysis.hardware import THIS_MACHINE, hardware_names
from explorer.config import SamplingSettings
from explorer.figures.theme import empty_figure
from explorer.runner.loading import LoadedModel
from explorer.ui import handlers
from explorer.ui.models import ModelRegistry
from explorer.ui.views import VIEWS

ASSETS = Path(__file__).resolve().parents[2] / "assets"
MODEL_QUEUE = "model"  # every event that may run the model shares one queue
SESSION_TTL_S = 3600  # a visitor's session (ids, KV cache, traces) is freed an hour after its last step
# The app starts in sampling mode so the sampling view has filters to show; the seed makes it repeatable.
APP_SAMPLING = SamplingSettings(do_sample=True, temperature=0.8, top_k=50, top_p=0.9, min_p=0.0)
VIEW_TITLES = {"journey": "Journey", "attention": "Attention", "kv_cache": "KV cache", "sampling": "Sampling",
               "roofline": "Roofline"}
PLOT_IDS = {"journey": "journey-plot", "attention": "attention-plot", "kv_cache": "kv-plot",
            "sampling": "sampling-plot", "roofline": "roofline-plot"}
SHORTCUTS = "Keys (outside text fields): **N** next token · **P** prefill · **R** reset · **1-5** switch views"


def example_prompts() -> list[str]:
    """The example prompts shipped in assets/examples.json."""
    return json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))


def launch_options() -> dict:
    """Keyword arguments for `Blocks.launch`: the stylesheet, the keyboard shortcuts, no SSR (Node
    24+ would be needed) and no run history kept in the browser."""
    return {"css": (ASSETS / "app.css").read_text(encoding="utf-8"),
            "head": (ASSETS / "shortcuts.js").read_text(encoding="utf-8"),
            "ssr_mode": False, "run_history": False}


def build_demo(loaded: LoadedModel, device: str = "cpu") -> gr.Blocks:
    """The Gradio app; `loaded` is the start-up model, shared read-only by every visitor, and other
    models picked in the app are loaded on `device`."""
    registry = ModelRegistry(loaded, device)
    with gr.Blocks(title="LLM Inference Explorer") as demo:
        gr.Markdown("# LLM Inference Explorer\nType a prompt, run the **prefill**, then one **decode** step "
                    "at a time, and see what the model computes.")
        visit_state = gr.State(None, time_to_live=SESSION_TTL_S)
        shown_state = gr.State(VIEWS[0])  # the view whose tab is selected: the only one drawn per step
        prompt = _prompt_controls(registry, loaded)
        sampling = _sampling_controls()
        with gr.Row():
            prefill_btn = gr.Button("Prefill", variant="primary", elem_id="prefill-btn")
            decode_btn = gr.Button("Next token", elem_id="decode-btn")
            run_count = gr.Number(8, label="N", precision=0, minimum=1, maximum=handlers.MAX_RUN_TOKENS,
                                  elem_id="run-count", min_width=80, scale=0)
            run_btn = gr.Button("Run N tokens", elem_id="run-btn")
            reset_btn = gr.Button("Reset", variant="stop", elem_id="reset-btn")
        gr.Markdown(SHORTCUTS, elem_id="shortcuts")
        status_md = gr.Markdown(elem_id="status")
        strip_html = gr.HTML(elem_id="token-strip")
        text_box = gr.Textbox(label="Generated text", interactive=False, elem_id="generated-text", lines=2)
        with gr.Row():
            step_select = gr.Dropdown([], label="Step shown", elem_id="step-select", interactive=True)
            layer_slider = gr.Slider(0, loaded.model.config.num_hidden_layers - 1, 0, step=1, label="Layer",
                                     elem_id="layer-slider")
            average_box = gr.Checkbox(False, label="Attention: average over heads", elem_id="average-heads")
            hardware_select = gr.Dropdown(hardware_names(), value=THIS_MACHINE, label="Roofline hardware",
                                          elem_id="hardware-select")
        tabs, plots = _view_tabs()

        view_controls = [layer_slider, average_box, hardware_select, shown_state]
        step_outputs = [visit_state, status_md, strip_html, text_box, step_select, layer_slider, *plots]
        # Progress (and an error's mark) on the status line only: the views stay readable meanwhile.
        model_run = {"concurrency_id": MODEL_QUEUE, "show_progress_on": [status_md]}
        prefill_btn.click(functools.partial(handlers.on_prefill_click, registry), [*prompt, *sampling, *view_controls],
                          step_outputs, api_name="prefill", trigger_mode="always_last", **model_run)
        # every click on Next token is one step, run in order, even while the previous one runs
        decode_btn.click(handlers.on_decode_click, [visit_state, *sampling, *view_controls], step_outputs,
                         api_name="decode", trigger_mode="multiple", **model_run)
        run_btn.click(handlers.on_run_click, [visit_state, run_count, *sampling, *view_controls], step_outputs,
                      api_name="run", trigger_mode="always_last", **model_run)
        reset_btn.click(handlers.on_reset_click, None, step_outputs, api_name="reset")
        view_inputs = [visit_state, step_select, layer_slider, average_box, hardware_select]
        for control in (step_select, layer_slider, average_box):
            control.input(handlers.on_view_change, [*view_inputs, shown_state], plots, concurrency_id=MODEL_QUEUE)
        for view, tab, plot in zip(VIEWS, tabs, plots, strict=True):
            tab.select(handlers.on_tab_select(view), view_inputs, [shown_state, plot], concurrency_id=MODEL_QUEUE)
        hardware_select.input(handlers.on_hardware_change, [visit_state, step_select, hardware_select], plots[-1])
        for control in sampling[:5]:
            control.input(handlers.on_sampling_change, [visit_state, step_select, *sampling], plots[3])
    return demo


def _prompt_controls(registry: ModelRegistry, loaded: LoadedModel) -> list[gr.components.Component]:
    """Model choice, prompt and chat template; returns them in `on_prefill_click`'s order."""
    no_tokenizer = loaded.tokenizer is None
    with gr.Row():
        with gr.Column(scale=3):
            prompt_box = gr.Textbox(example_prompts()[0], label="Prompt", elem_id="prompt-box", lines=3)
            gr.Examples([[p] for p in example_prompts()], [prompt_box], label="Example prompts")
        with gr.Column(scale=2):
            model_select = gr.Dropdown(registry.choices(), value=registry.default_choice, label="Model",
                                       info=loaded.description, elem_id="model-select")
            custom_model = gr.Textbox(label="Or any causal LM: hub id or local folder", elem_id="custom-model",
                                      placeholder="e.g. Qwen/Qwen3-0.6B or /path/to/model")
            prompt_tokens = gr.Number(17, label="Prompt length in tokens (shape-only models without a tokenizer)",
                                      precision=0, minimum=1, elem_id="prompt-tokens", visible=no_tokenizer)
            chat_template = gr.Checkbox(True, label="Use the chat template", elem_id="chat-template")
            system_prompt = gr.Textbox(label="System prompt (optional, chat template only)", elem_id="system-prompt")
    model_select.input(lambda choice: gr.update(visible=choice.startswith("shape-only")), model_select, prompt_tokens)
    return [model_select, custom_model, prompt_box, prompt_tokens, chat_template, system_prompt]


def _sampling_controls() -> list[gr.components.Component]:
    """The sampling controls, in `settings_from`'s order."""
    s = APP_SAMPLING
    with gr.Accordion("Sampling: greedy or sample, temperature, top-k, top-p, min-p, seed", open=False):
        with gr.Row():
            sample_box = gr.Checkbox(s.do_sample, label="Sample (off: greedy)", elem_id="do-sample")
            seed_box = gr.Number(s.seed, label="Seed", precision=0, minimum=0, elem_id="seed")
            max_new_box = gr.Number(s.max_new_tokens, label="Max new tokens", precision=0, minimum=1,
                                    elem_id="max-new-tokens")
        with gr.Row():
            temperature = gr.Slider(0.05, 2.0, s.temperature, step=0.05, label="Temperature", elem_id="temperature")
            top_k = gr.Slider(0, 200, s.top_k, step=1, label="Top-k", info="0: off", elem_id="top-k")
            top_p = gr.Slider(0.01, 1.0, s.top_p, step=0.01, label="Top-p", info="1: off", elem_id="top-p")
            min_p = gr.Slider(0.0, 1.0, s.min_p, step=0.01, label="Min-p", info="0: off", elem_id="min-p")
    return [sample_box, temperature, top_k, top_p, min_p, seed_box, max_new_box]


def _view_tabs() -> tuple[list[gr.Tab], list[gr.Plot]]:
    """One tab per view, each with its Plotly figure; returns the tabs and the plots in `VIEWS` order."""
    tabs, plots = [], []
    with gr.Tabs(elem_id="views"):
        for view in VIEWS:
            with gr.Tab(VIEW_TITLES[view], id=view, elem_id=f"tab-{view}") as tab:
                plots.append(gr.Plot(empty_figure(view, handlers.EMPTY_VIEW), show_label=False,
                                     elem_id=PLOT_IDS[view]))
            tabs.append(tab)
    return tabs, plots
