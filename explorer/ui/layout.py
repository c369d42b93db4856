"""The app's layout and wiring: components, then `event(handler, inputs, outputs)`."""

from __future__ import annotations

import functools

import gradio as gr

from explorer.config import SamplingSettings
from explorer.journey import JOURNEY_HEADER
from explorer.runner.loading import LoadedModel
from explorer.ui.handlers import on_decode_click, on_prefill_click

EXAMPLE_PROMPT = "What is the capital of France?"
MODEL_QUEUE = "model"  # every model-running event shares one queue
SESSION_TTL_S = 3600  # a visitor's session (ids, KV cache, traces) is freed an hour after its last step


def build_demo(loaded: LoadedModel) -> gr.Blocks:
    """The Gradio app over one loaded model, shared read-only by every visitor."""
    defaults = SamplingSettings()
    with gr.Blocks(title="LLM Inference Explorer") as demo:
        gr.Markdown(f"# LLM Inference Explorer\nModel: {loaded.description}")
        session_state = gr.State(None, time_to_live=SESSION_TTL_S)
        with gr.Row():
            prompt_box = gr.Textbox(EXAMPLE_PROMPT, label="Prompt", elem_id="prompt-box", scale=4,
                                    visible=loaded.tokenizer is not None)
            prompt_tokens_box = gr.Number(17, label="Prompt length in tokens (shape-only, no tokenizer)",
                                          precision=0, minimum=1, visible=loaded.tokenizer is None,
                                          elem_id="prompt-tokens")
            chat_template_box = gr.Checkbox(True, label="Use the chat template", elem_id="chat-template",
                                            visible=loaded.tokenizer is not None)
        with gr.Accordion("Sampling", open=False):
            with gr.Row():
                sample_box = gr.Checkbox(defaults.do_sample, label="Sample (off: greedy)", elem_id="do-sample")
                seed_box = gr.Number(defaults.seed, label="Seed", precision=0, minimum=0)
                max_new_box = gr.Number(defaults.max_new_tokens, label="Max new tokens", precision=0, minimum=1)
            with gr.Row():
                temperature_slider = gr.Slider(0.05, 2.0, defaults.temperature, step=0.05, label="Temperature")
                top_k_slider = gr.Slider(0, 200, defaults.top_k, step=1, label="Top-k", info="0: off")
                top_p_slider = gr.Slider(0.01, 1.0, defaults.top_p, step=0.01, label="Top-p", info="1: off")
                min_p_slider = gr.Slider(0.0, 1.0, defaults.min_p, step=0.01, label="Min-p", info="0: off")
        with gr.Row():
            prefill_btn = gr.Button("Run prefill", variant="primary", elem_id="prefill-btn")
            decode_btn = gr.Button("Next token", elem_id="decode-btn")
        status_md = gr.Markdown(elem_id="status")
        text_box = gr.Textbox(label="Generated text", interactive=False, elem_id="generated-text")
        journey_table = gr.Dataframe(headers=JOURNEY_HEADER, label="Layer 0, stop by stop", interactive=False,
                                     elem_id="journey-table", wrap=True,
                                     column_widths=["17%", "8%", "30%", "7%", "30%", "8%"])
        kv_md = gr.Markdown(elem_id="kv-cache")

        sampling = [sample_box, temperature_slider, top_k_slider, top_p_slider, min_p_slider, seed_box,
                    max_new_box]
        outputs = [session_state, status_md, text_box, journey_table, kv_md]
        prefill_btn.click(functools.partial(on_prefill_click, loaded), [prompt_box, prompt_tokens_box, chat_template_box, *sampling],
                          outputs, concurrency_id=MODEL_QUEUE, trigger_mode="once", api_name="prefill")
        decode_btn.click(on_decode_click, [session_state, *sampling], outputs, concurrency_id=MODEL_QUEUE,
                         trigger_mode="once", api_name="decode")
    return demo
