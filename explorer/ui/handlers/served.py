"""The handlers that need the app's models, limits and live sessions (`Served`): the prefill, a
saved run loaded, the figure API, and a page's life (opened, its lease renewed, its events let into
the queue, reset, closed).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import gradio as gr

from explorer.analysis.measured import Scenario
from explorer.errors import ConfigError, ExplorerError, PromptError, SessionStateError
from explorer.figures.views import VIEWS
from explorer.runner.prompts import check_prompt_chars
from explorer.ui.handlers.controls import PROMPT_INPUTS, PromptControls, SamplingControls, ViewControls
from explorer.ui.handlers.outputs import RESTORED_INPUTS, STEP_OUTPUTS, empty_outputs
from explorer.ui.handlers.redraw import is_open
from explorer.ui.handlers.saved import open_saved
from explorer.ui.handlers.steps import freed_text, prefill
from explorer.ui.hosting import Served
from explorer.ui.links import LINK_FIELDS, values_from_query
from explorer.ui.startup import prompt_label
from explorer.ui.toasts import shows_errors
from explorer.ui.views import Visit, own_hardware, render


class ServedHandlers:
    """The handlers that need the app's models, limits and live sessions.

    Bound methods, not `functools.partial`s: Gradio passes `gr.Request` (the page's session hash)
    only to a callable whose type hints it can read (a partial hides them), and only in a positional
    parameter before any `*controls`. Their parameters are the API's (`explorer.ui.api`).
    """

    def __init__(self, served: Served) -> None:
        self.served = served

    @shows_errors
    def on_prefill_click(self, request: gr.Request | None, progress: gr.Progress | None = gr.Progress(),
                         model: str | None = None, custom_model: str | None = None, prompt: str | None = None,
                         prompt_tokens: float | None = None, use_chat_template: bool = True,
                         system_prompt: str | None = None, enable_thinking: bool = False,
                         batch_lines: bool = False, lm_head_all: bool = False,
                         do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                         min_p: float = 0.0, seed: float = 0, max_new_tokens: float = 64, layer: int = 0,
                         average_heads: bool = False, hardware: str = "", shown: str = "forward",
                         presenter: bool = False, zoom: int | None = None, what_if: Scenario | None = None):
        """Start a new run: the prefill of `prompt` on `model` (`explorer.ui.handlers.steps.prefill`).

        Args:
            model: a model menu entry; custom_model: a hub id or local folder instead (if not empty).
            prompt: the text; prompt_tokens: a token count instead (shape-only models without a tokenizer).
            use_chat_template: wrap the prompt in the model's chat template, with `system_prompt`.
            enable_thinking: the chat template's thinking switch (Qwen3's `enable_thinking`).
            batch_lines: a batch, one prompt per line of `prompt` (up to 8, left-padded; the run and the
                views show sequence 0).
            lm_head_all: the LM head over every position ([B, T, V] logits) instead of the last one.
            do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens: the sampling settings.
            layer, average_heads, hardware, shown, presenter, zoom, what_if: the view controls.

        Returns the step outputs (`explorer.ui.handlers.outputs.step_outputs`)."""
        controls = PromptControls(model, custom_model, prompt, prompt_tokens, use_chat_template, system_prompt,
                                  enable_thinking, batch_lines, lm_head_all)
        sampling = SamplingControls(do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens)
        view = ViewControls(layer, average_heads, hardware, shown, presenter, zoom, what_if)
        return prefill(self.served, page_of(request), request, progress, controls, sampling, view)

    @shows_errors
    def on_figure_call(self, view: str = "forward", step: int | None = None, layer: int = 0,
                       average_heads: bool = False, hardware: str | None = None, zoom: int | None = None,
                       presenter: bool = False, request: gr.Request | None = None) -> str:
        """One view's figure of this client's run, as Plotly JSON (`plotly.io.from_json`), drawn as the
        app draws it.

        Args:
            view: forward, journey, attention, kv_cache, sampling, roofline or lens.
            step: 0 for the prefill, k for the k-th decode step; None: the latest.
            layer: the decoder layer (forward, journey, attention).
            average_heads: attention: the mean over query heads.
            hardware: the roofline's machine (e.g. h100-sxm, this-machine); None: the one the run ran on.
            zoom: attention: the first token of a 48-token window drawn at full resolution; None: all.
            presenter: larger text, for a projector.

        Returns the figure as JSON text.
        """
        if view not in VIEWS:
            raise ConfigError(f"Unknown view {view!r}: pick one of {', '.join(VIEWS)}.")
        page = page_of(request)
        self.served.live.renew(page)
        visit = self.served.live.visit(page)
        if not is_open(visit):
            raise SessionStateError("Nothing to draw yet: call /prefill first (with this client).")
        options = ViewControls(layer, average_heads, hardware or "", view, presenter, zoom).options(visit, step)
        if not hardware:
            options = replace(options, hardware=own_hardware(visit, options.step))
        return render(visit, options, view).to_json()

    def on_model_select(self, choice: str) -> tuple:
        """The prompt controls for a menu entry: a text prompt with the chat-template controls, or, for a
        shape-only model without a tokenizer, a prompt length (the text box then says it is not used)."""
        text = self.served.registry.takes_text(choice)
        return (gr.update(label=prompt_label(text)), gr.update(visible=not text), gr.update(visible=text),
                gr.update(visible=text), gr.update(visible=text))

    def on_reset_click(self, request: gr.Request | None = None):
        """Forget the page's session once the person confirmed it (its memory is freed): empty state,
        status, tokens, text, steps and views, the question closed."""
        self.served.live.release(page_of(request))
        return empty_outputs()

    @shows_errors
    def on_import_upload(self, request: gr.Request | None, path: str | None, *view_controls):
        """Show a saved run (no model needed): every view, every step (`open_saved`). Returns the
        step outputs with every view drawn, then the prompt and sampling controls as the run had them
        (`RESTORED_INPUTS` order; those the file does not hold are left as they are).

        The file is checked against the saved-run schema and drawn before it becomes the page's
        session: a file that cannot be shown is refused with a message, and the page's session and
        views stay as they were."""
        if not path:
            return tuple(gr.skip() for _ in range(STEP_OUTPUTS + len(RESTORED_INPUTS)))
        return open_saved(self.served, page_of(request), request, path, ViewControls(*view_controls))

    def on_page_load(self, request: gr.Request | None = None) -> tuple:
        """Fill the controls named in the page's query parameters (a shared link); warn about values
        that cannot be read or a model not in the menu, and leave those controls as they are. Then
        enable Prefill (the last output), which the page starts without, so no prefill runs before the
        link's settings are in the controls."""
        values, unreadable = values_from_query(dict(request.query_params) if request else {})
        if values.get("model_choice") not in (None, *self.served.registry.choices()):
            unreadable.append("model")
            del values["model_choice"]
        if unreadable:
            gr.Warning(f"The link's {', '.join(unreadable)} could not be used; the defaults stay.")
        return (*(values.get(field, gr.skip()) for field in LINK_FIELDS), gr.update(interactive=True))

    def on_page_close(self, request: gr.Request | None = None) -> None:
        """Free the session of a page that closed (and refuse one its running step would admit later)."""
        self.served.live.release(page_of(request), page_closed=True)

    def on_lease_tick(self, request: gr.Request | None, visit: Visit | None = None):
        """The page's timer ticked, so the page is open: renew its session's lease (and free the
        sessions whose lease ran out). A page whose session was freed meanwhile (it was quiet past its
        lease: a laptop asleep) says so on its status line, with the click that starts again; any
        other page's status line is left as it is."""
        self.served.live.renew(page_of(request))
        if visit is None or visit.open:
            return gr.skip()
        return freed_text(visit)

    async def validate_model_event(self, request: gr.Request | None, *inputs) -> list[dict]:
        """Gradio's validator of a model event, run as the page sends it, before it is queued: the page
        is open (its lease is renewed) and, where the app caps them, may have one more model event queued.

        Async, and the cap checked last: Gradio queues the event before it runs another validator
        (`EventGate`). Returns `gr.validate(True, "")` for each of the event's inputs.

        Raises:
            SessionStateError: the page has `Limits.max_pending_events` model events in the queue (Gradio
                answers the push with the message, which the page shows as a toast).
        """
        # renewing may close expired sessions, which waits for a step in flight: not on the event loop
        await asyncio.to_thread(self.served.live.renew, page_of(request))
        if self.served.events is not None:
            self.served.events.admit(page_of(request))
        return [gr.validate(True, "") for _ in inputs]

    async def validate_prefill(self, request: gr.Request | None, *inputs) -> list[dict]:
        """`validate_model_event` for Prefill, after refusing, before it is queued, a prompt or system
        prompt far past the prompt cap (`check_prompt_chars`, before it is tokenised) and a hub id or
        folder that names no model (`ModelRegistry.resolve`, in a worker thread: the hub's answer, or
        its silence, holds no other page's step); the message shows on its box. `inputs` are
        `on_prefill_click`'s."""
        results = [gr.validate(True, "") for _ in inputs]
        limits = self.served.limits
        for name, what in (("prompt", "prompt"), ("system_prompt", "system prompt")):
            index = PROMPT_INPUTS.index(name)
            try:
                check_prompt_chars(inputs[index], what, limits.max_prompt_tokens, self.served.limit_advice())
            except PromptError as exc:
                results[index] = gr.validate(False, str(exc))
                return results
        index = PROMPT_INPUTS.index("custom_model")
        try:
            await asyncio.to_thread(self.served.registry.resolve, inputs[index])
        except ExplorerError as exc:
            results[index] = gr.validate(False, str(exc))
            return results
        return await self.validate_model_event(request, *inputs)

    def expiry_callback(self):
        """A `gr.State` delete callback that frees the session of a page idle past its time to live.

        A plain function: Gradio deep-copies a component's arguments on every page load, and a
        bound method would drag the app, and the model with it, into that copy.
        """
        live = self.served.live

        def on_state_expired(visit: Visit | None) -> None:
            if visit is not None:
                live.forget(visit)

        return on_state_expired


def page_of(request: gr.Request | None) -> str:
    """The page's Gradio session hash ("local" when a handler is called directly, as in tests)."""
    return getattr(request, "session_hash", None) or "local"
