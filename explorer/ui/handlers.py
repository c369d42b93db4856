"""Event handlers of the app: thin, one per event, every per-person value in the session state.

A handler takes the components' values, runs the session or redraws a view, and returns the
components' new values. Only the view on screen (its tab selected) is drawn; another view is drawn
when its tab is selected, so a step costs one figure, not five. Every failure becomes a toast that
says what happened and what to do (`explorer.ui.toasts`); Gradio then leaves every output as it
was, so the person's session and the figures on screen are kept.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import gradio as gr

from explorer.analysis.measured import Scenario
from explorer.analysis.precision import DTYPE_BITS
from explorer.config import SamplingSettings
from explorer.errors import ConfigError, ExplorerError, PromptError, SamplingSettingsError, SessionStateError
from explorer.figures.equivalence import equivalence_figure
from explorer.figures.lens import LENS_STATS
from explorer.figures.theme import empty_figure, plain_label
from explorer.figures.views import VIEWS, ViewOptions
from explorer.journey import step_label
from explorer.run import Run
from explorer.runner.drive import decode_steps
from explorer.runner.prompts import check_prompt_chars
from explorer.saved import load_run
from explorer.ui.export import export_label, plan_export, size_text, write_export, write_view_html
from explorer.ui.hosting import Limits, Served, client_address
from explorer.ui.links import LINK_FIELDS, query_string, values_from_query
from explorer.ui.plain import markdown_text
from explorer.ui.startup import prompt_label
from explorer.ui.status import generated_text, status_text, strip_html
from explorer.ui.toasts import shows_errors, toast_text
from explorer.ui.views import Visit, own_hardware, render

if TYPE_CHECKING:
    from explorer.runner.session import InferenceSession

# The handlers' inputs by component name (`explorer.ui.layout` wires them by these names), in order.
PROMPT_INPUTS = ("model_choice", "custom_model", "prompt", "prompt_tokens", "use_chat_template", "system_prompt",
                 "enable_thinking", "batch_lines", "lm_head_all")
SAMPLING_FIELDS = ("do_sample", "temperature", "top_k", "top_p", "min_p", "seed", "max_new_tokens")  # settings_from
VIEW_INPUTS = ("layer", "average", "hardware", "shown", "presenter", "zoom", "what_if")  # step_outputs' view controls
# the roofline's what-if controls, in `scenario_from` order
WHAT_IF_FIELDS = ("wi_batch", "wi_context", "wi_tokens", "wi_weights", "wi_activations", "wi_kv", "wi_merged", "wi_fused",
                  "wi_lm_head_all")
SAMPLING_INPUTS = len(SAMPLING_FIELDS)
RESTORED_INPUTS = ("prompt", "prompt_tokens", "use_chat_template", "system_prompt", "enable_thinking",
                   *SAMPLING_FIELDS)  # a loaded run's
EMPTY_VIEW = "Type a prompt and press Prefill."
EQUIVALENCE_EMPTY = "Prefill a prompt, then press \"Run the experiment\": the same logits computed equivalent ways."
APP_EQUIVALENCE_STEPS = 8  # the experiment holds the shared model: few steps in the app (the CLI takes 32)
# visit, status, token strip, text, step menu, layer slider, the "go on from which step" question, Reset's
# "are you sure" question, the views
STEP_OUTPUTS = 8 + len(VIEWS)


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


def settings_from(do_sample: bool, temperature: float, top_k: float, top_p: float, min_p: float,
                  seed: float, max_new_tokens: float) -> SamplingSettings:
    """Sampling settings from the controls' values (`SamplingSettings.from_controls`).

    Raises:
        SamplingSettingsError: a field left empty, not a number, or a value out of its range.
    """
    return SamplingSettings.from_controls(do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens)


class ServedHandlers:
    """The handlers that need the app's models, limits and live sessions.

    Bound methods, not `functools.partial`s: Gradio passes `gr.Request` (the page's session hash)
    only to a callable whose type hints it can read (a partial hides them), and only in a positional
    parameter before any `*controls`.
    """

    def __init__(self, served: Served) -> None:
        self.served = served

    @shows_errors
    def on_prefill_click(self, request: gr.Request | None, progress: gr.Progress | None = gr.Progress(),
                         model: str | None = None, custom_model: str | None = None, prompt: str | None = None,
                         prompt_tokens: float | None = None, use_chat_template: bool = True,
                         system_prompt: str | None = None, enable_thinking: bool = False,
                         batch_lines: bool = False, lm_head_all: bool = False,
                         do_sample: bool = False, temperature: float = 1.0, top_k: float = 0, top_p: float = 1.0,
                         min_p: float = 0.0, seed: float = 0, max_new_tokens: float = 64, layer: float = 0, average_heads: bool = False,
                         hardware: str = "", shown: str = "forward", presenter: bool = False,
                         zoom: str | None = None, what_if: Scenario | None = None):
        """Start a new run: the prefill of `prompt` on `model`, its progress shown layer by layer.

        Args:
            model: a model menu entry; custom_model: a hub id or local folder instead (if not empty).
            prompt: the text; prompt_tokens: a token count instead (shape-only models without a tokenizer).
            use_chat_template: wrap the prompt in the model's chat template, with `system_prompt`.
            enable_thinking: the chat template's thinking switch (Qwen3's `enable_thinking`).
            batch_lines: a batch, one prompt per line of `prompt` (up to 8, left-padded; the run and the
                views show sequence 0).
            lm_head_all: the LM head over every position ([B, T, V] logits) instead of the last one.
            do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens: the sampling settings.
            layer, average_heads, hardware, presenter, zoom: the view controls (`step_outputs`).

        Returns the step outputs (`step_outputs`)."""
        sampling = (do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens)
        settings = allowed_settings(settings_from(*sampling), self.served.limits)
        loaded = self.served.registry.get(model, custom_model)  # waits for the start-up model's load
        from explorer.runner.session import InferenceSession  # imported by then (explorer.ui.launch)

        session = InferenceSession(loaded, settings, max_prompt_tokens=self.served.limits.max_prompt_tokens,
                                   limit_advice=self.served.limit_advice())
        self.served.live.check_room(_page(request), client_address(request))
        on_start, on_layer = (None, None) if progress is None else _layer_progress(progress)
        if loaded.tokenizer is None:
            # an empty box (0): "needs at least one token"
            session.prefill(prompt_tokens=_index(prompt_tokens, 0, 2**62), on_layer=on_layer,
                            on_start=on_start, lm_head_all=bool(lm_head_all))
        else:
            prompts = prompt_lines(prompt) if batch_lines else None
            session.prefill(None if prompts else prompt, use_chat_template=use_chat_template,
                            system_prompt=(system_prompt or "").strip() or None, on_layer=on_layer,
                            enable_thinking=bool(enable_thinking), lm_head_all=bool(lm_head_all), prompts=prompts,
                            on_start=on_start)
        visit = Visit.start(session, self.served.limits)
        self.served.live.admit(_page(request), visit, client_address(request))  # refused if the page closed
        return step_outputs(visit, layer, average_heads, hardware, shown, presenter, zoom, what_if)

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
        page = _page(request)
        self.served.live.renew(page)
        visit = self.served.live.visit(page)
        if not _open(visit):
            raise SessionStateError("Nothing to draw yet: call /prefill first (with this client).")
        options = _options(visit, step, layer, average_heads, hardware or "", presenter, zoom)
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
        self.served.live.release(_page(request))
        empty = [empty_figure(view, EMPTY_VIEW) for view in VIEWS]
        return None, "", "", "", gr.update(choices=[], value=None), gr.skip(), _hidden(), _hidden(), *empty

    @shows_errors
    def on_import_upload(self, request: gr.Request | None, path: str | None, *view_controls):
        """Show a saved run (no model needed): every view, every step. Returns the step outputs with
        every view drawn, then the prompt and sampling controls as the run had them
        (`RESTORED_INPUTS` order; those the file does not hold are left as they are).

        The file is checked against the saved-run schema and drawn before it becomes the page's
        session: a file that cannot be shown is refused with a message, and the page's session and
        views stay as they were."""
        if not path:
            return tuple(gr.skip() for _ in range(STEP_OUTPUTS + len(RESTORED_INPUTS)))
        self.served.registry.pending.wait()  # the views import the runner, which the start-up load imports first
        visit = Visit.replay(*load_run(path), self.served.limits)
        outputs = _replay_outputs(visit, *view_controls)
        self.served.live.admit(_page(request), visit, client_address(request))
        return (*outputs, *restored_controls(visit.run))

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
        self.served.live.release(_page(request), page_closed=True)

    def on_lease_tick(self, request: gr.Request | None = None) -> None:
        """The page's timer ticked, so the page is open: renew its session's lease (and free the
        sessions whose lease ran out)."""
        self.served.live.renew(_page(request))

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
        await asyncio.to_thread(self.served.live.renew, _page(request))
        if self.served.events is not None:
            self.served.events.admit(_page(request))
        return [gr.validate(True, "") for _ in inputs]

    async def validate_prefill(self, request: gr.Request | None, *inputs) -> list[dict]:
        """`validate_model_event` for Prefill, after refusing a prompt or system prompt far past the
        prompt cap before it is queued or tokenised (`check_prompt_chars`); the message shows on its
        box. `inputs` are `on_prefill_click`'s."""
        results = [gr.validate(True, "") for _ in inputs]
        limits = self.served.limits
        for name, what in (("prompt", "prompt"), ("system_prompt", "system prompt")):
            index = PROMPT_INPUTS.index(name)
            try:
                check_prompt_chars(inputs[index], what, limits.max_prompt_tokens, self.served.limit_advice())
            except PromptError as exc:
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


@shows_errors
def on_decode_click(visit: Visit | None, do_sample: bool = False, temperature: float = 1.0, top_k: float = 0,
                    top_p: float = 1.0, min_p: float = 0.0, seed: float = 0, max_new_tokens: float = 64,
                    layer: float = 0, average_heads: bool = False, hardware: str = "", shown: str = "forward",
                    presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None):
    """Run one decode step of this page's run (`_decode_from`), with the sampling settings from this
    step on (see /prefill for the parameters). Returns the step outputs."""
    controls = (do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens, layer, average_heads, hardware,
                shown, presenter, zoom, what_if)
    return tuple(_decode_from(visit, 1, controls))[-1]


@shows_errors
def on_run_click(visit: Visit | None, count: float | None, do_sample: bool = False, temperature: float = 1.0,
                 top_k: float = 0, top_p: float = 1.0, min_p: float = 0.0, seed: float = 0, max_new_tokens: float = 64,
                 layer: float = 0, average_heads: bool = False, hardware: str = "", shown: str = "forward",
                 presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None):
    """Run up to `count` decode steps, redrawing after each; stops early where generation ends (see
    /prefill for the other parameters). Yields the step outputs after each step."""
    _session(visit)
    most = visit.limits.max_run_tokens
    if count is None or not 1 <= count <= most:
        raise SessionStateError(f"Run between 1 and {most} tokens at a time.")
    controls = (do_sample, temperature, top_k, top_p, min_p, seed, max_new_tokens, layer, average_heads, hardware,
                shown, presenter, zoom, what_if)
    yield from _decode_from(visit, int(count), controls)


@shows_errors
def on_branch_click(visit: Visit | None, *controls):
    """Continue from the earlier step the page showed when it asked: the later steps are dropped, the
    KV cache cut back to that step (`InferenceSession.branch`), then the steps asked for are run."""
    session = _session(visit)
    step, count = _pending(visit)
    session.branch(step)
    yield from _decode(visit, count, controls)


@shows_errors
def on_latest_click(visit: Visit | None, *controls):
    """Go on from the latest step instead: the steps asked for are run after it, nothing is dropped."""
    _session(visit)
    _, count = _pending(visit)
    yield from _decode(visit, count, controls)


def _decode_from(visit: Visit | None, count: int, controls: tuple):
    """Decode `count` steps after the latest one, or, where the person went back to an earlier step
    (`Visit.viewing`: the page's step menu, read when it was chosen, not when a click was queued, so
    clicks queued during a step still run one after another), ask first whether to continue from it
    (the later steps dropped) or from the latest step; a finished generation says so on the status line."""
    _session(visit)
    if visit.viewing is not None:
        visit.pending = (visit.viewing, count)
        return iter([_offer_outputs(visit, visit.viewing)])
    return _decode(visit, count, controls)


def _decode(visit: Visit, count: int, controls: tuple):
    """Run up to `count` decode steps after the latest one, yielding the step outputs after each."""
    sampling, view_controls = controls[:SAMPLING_INPUTS], controls[SAMPLING_INPUTS:]
    visit.viewing = None
    session = visit.session
    if session.finished:
        yield _ended_outputs(visit)
        return
    settings = allowed_settings(settings_from(*sampling), visit.limits)  # kept only if the step runs
    for _ in decode_steps(session, count, settings):
        yield step_outputs(visit, *view_controls)


def _pending(visit: Visit) -> tuple[int, int]:
    if visit.pending is None:
        raise SessionStateError("There is no step waiting to be run: press Next token.")
    return visit.pending


def _offer_outputs(visit: Visit, step: int) -> tuple:
    """The step outputs that ask where to go on from: the status line says what each choice does, the
    two buttons appear; the rest stays as it is."""
    latest = visit.run.latest
    earlier = visit.run.steps[step]
    later = f"step {step + 1}" if step + 1 == latest.step_index else f"steps {step + 1} to {latest.step_index}"
    line = (f"{status_text(visit, step)}\n\n**Go on from which step?** \"Continue from step {step}\" drops "
            f"{later} and cuts the KV cache back to n = {earlier.context_length}; \"Go on from the latest\" "
            f"runs after {step_label(latest)} and drops nothing.")
    skips = [gr.skip()] * (STEP_OUTPUTS - 3)
    return (gr.skip(), line, *skips[:4], gr.update(visible=True), *skips[4:])


def _close_question(visit: Visit) -> dict:
    """The "go on from which step" row's update: hidden where it was asked, else left as it is (a
    visibility update re-lays the page out in the browser, so it is sent only when it changes)."""
    asked, visit.pending = visit.pending is not None, None
    return _hidden() if asked else gr.skip()


def _ended_outputs(visit: Visit) -> tuple:
    """The step outputs when generation has ended: a status line that says so and what to do next."""
    latest = visit.run.latest
    line = (f"{status_text(visit, latest.step_index)} Press Prefill for a new run, or pick an earlier step "
            "in \"Step shown\" and continue from it.")
    gr.Info(f"Generation ended ({latest.finish_reason.replace('_', ' ')}).", title="Done")
    skips = [gr.skip()] * (STEP_OUTPUTS - 3)
    return (gr.skip(), line, *skips[:4], _close_question(visit), *skips[4:])


@shows_errors
def on_export_click(visit: Visit | None) -> str:
    """Save this page's run as JSON (every step's trace and attention matrix; `explorer.saved`), to
    download: its estimated size (and whether attention is left out, over a hosted app's cap) said in
    a message before it is written, the file in Gradio's cache folder (served without a copy), the
    page's previous export deleted (`explorer.ui.export`). Returns the file's path (the download
    button then shows it: `show_download`)."""
    if visit is None:
        raise SessionStateError("Nothing to export yet: run the prefill first.")
    plan = plan_export(visit)
    left_out = f" ({plan.attention_left_out})" if plan.attention_left_out else ""
    gr.Info(f"Writing the run as JSON: {plan.summary()}{left_out}.", title="Export")
    return str(write_export(visit, plan))


@shows_errors
def on_view_html_click(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
                       shown: str, presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None,
                       *sampling) -> str:
    """The view on screen as one HTML page that opens offline (for slides): the figure drawn as on
    screen (the sampling view's preview too, `sampling` being the seven sampling controls), plotly.js
    inlined; the page's previous one deleted (`explorer.ui.export.write_view_html`). Returns the file's
    path (the download button then shows it: `show_download`)."""
    if not _open(visit):
        raise SessionStateError("Nothing to export yet: run the prefill first.")
    options = _options(visit, step, layer, average_heads, hardware, presenter, zoom, what_if)
    try:
        preview = settings_from(*sampling) if shown == "sampling" else None
    except SamplingSettingsError:
        preview = None  # the screen shows no preview for settings it cannot read either
    figure = render(visit, options, shown, preview)
    return str(write_view_html(visit, figure, f"explorer-{shown}-step-{options.step}.html"))


def show_download(path: str | None) -> dict:
    """A download button once its file is written: shown, named after the file with its size."""
    if not path:
        return gr.update(visible=False)
    size_bytes = Path(path).stat().st_size
    return gr.update(visible=True, label=f"⬇ Download {Path(path).name} ({size_text(size_bytes)})")


def no_export() -> tuple[dict, dict]:
    """The download buttons hidden: a new prefill or Reset freed the session whose exports they
    offered (and deleted the files)."""
    return gr.update(value=None, visible=False), gr.update(value=None, visible=False)


def on_export_label(visit: Visit | None):
    """The export button after a step: its label gives the export's estimated size."""
    return gr.update(value=export_label(visit))


def on_share_click(*values) -> str:
    """The query string of a link that fills in the current prompt, model and sampling settings
    (`values` in `LINK_FIELDS` order); the page puts its own address in front."""
    return query_string(dict(zip(LINK_FIELDS, values, strict=True)))


@shows_errors
def on_view_change(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
                   shown: str, presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None):
    """Redraw the view on screen for other view controls (attention the session did not keep is
    recomputed from its queries and KV cache, in the model queue)."""
    if not _open(visit):
        return tuple(gr.skip() for _ in VIEWS)
    return _views(visit, _options(visit, step, layer, average_heads, hardware, presenter, zoom, what_if), shown)


def model_info(visit: Visit | None):
    """The model menu's line under its label: what the page's session runs (after a prefill)."""
    return gr.skip() if visit is None else gr.update(info=f"In use: {markdown_text(visit.run.description)}")


@shows_errors
def on_step_change(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
                   shown: str, presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None):
    """Go to another step: its status line, the token strip and the generated text as they were after
    it, the view on screen redrawn (and no question left open on where to go on from)."""
    if not _open(visit):
        return tuple(gr.skip() for _ in range(4 + len(VIEWS)))
    options = _options(visit, step, layer, average_heads, hardware, presenter, zoom, what_if)
    visit.viewing = options.step if options.step < len(visit.run.steps) - 1 else None
    return (status_text(visit, options.step), strip_html(visit, options.step), generated_text(visit, options.step),
            _close_question(visit), *_views(visit, options, shown))


def on_tab_select(view: str):
    """The handler of a view's tab: remember it as the view on screen and draw it."""

    @shows_errors
    def select(visit: Visit | None, step: int | None, layer: int, average_heads: bool, hardware: str,
               presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None):
        if not _open(visit):
            return view, gr.skip()
        options = _options(visit, step, layer, average_heads, hardware, presenter, zoom, what_if)
        return view, render(visit, options, view)

    return select


@shows_errors
def on_hardware_change(visit: Visit | None, step: int | None, hardware: str, presenter: bool = False,
                       what_if: Scenario | None = None):
    """Redraw the roofline on another machine."""
    if not _open(visit):
        return gr.skip()
    return render(visit, _options(visit, step, 0, False, hardware, presenter, what_if=what_if), "roofline")


@shows_errors
def on_lens_stat_change(visit: Visit | None, stat: str, step: int | None, presenter: bool = False):
    """Colour the logit lens by another statistic (`LENS_STATS`), kept for the visit's later redraws."""
    if not _open(visit) or stat not in LENS_STATS:
        return gr.skip()
    visit.lens_stat = stat
    return render(visit, _options(visit, step, 0, False, "", presenter), "lens")


@shows_errors
def on_sink_threshold_change(visit: Visit | None, threshold: float | None, step: int | None, layer: int,
                             average_heads: bool, presenter: bool = False, zoom: str | None = None):
    """Mark as sinks the heads whose first token's importance exceeds another threshold (0..1), kept for
    the visit's later redraws; redraws the attention view."""
    if not _open(visit) or threshold is None:
        return gr.skip()
    visit.sink_threshold = min(1.0, max(0.0, float(threshold)))
    return render(visit, _options(visit, step, layer, average_heads, "", presenter, zoom), "attention")


def on_equivalence_tab(visit: Visit | None):
    """The run's experiment where it ran one (live or saved); else the figure says how to run it."""
    if not _open(visit) or visit.run.equivalence is None:
        return empty_figure("equivalence", EQUIVALENCE_EMPTY)
    return equivalence_figure(visit.run.equivalence, visit.run.piece)


@shows_errors
def on_equivalence_click(visit: Visit | None, steps: float | None):
    """Run the "equivalent is not identical" experiment on the prefill's prompt (the model's lock held
    meanwhile), keep its result in the run (an export saves it), and draw it."""
    if not _open(visit) or visit.saved:
        raise SessionStateError("Run a prefill first: the experiment runs the model on its prompt "
                                "(a saved run has no model).")
    count = _index(steps, 4, APP_EQUIVALENCE_STEPS)
    session = visit.session
    from explorer.runner.equivalence import run_equivalence  # a session ran: the runner is imported

    visit.run.equivalence = run_equivalence(session.loaded, visit.run.steps[0].input_ids, max(1, count))
    return equivalence_figure(visit.run.equivalence, visit.run.piece)


@shows_errors
def on_what_if_change(visit: Visit | None, step: int | None, hardware: str, presenter: bool, *values):
    """Redraw the roofline for the what-if controls' `values` (`WHAT_IF_FIELDS` order; an empty box
    or "as run" keeps the step's own value); the model is not run. Returns (the scenario, for the
    page's later redraws, and the roofline)."""
    scenario = scenario_from(*values)
    if not _open(visit):
        return scenario, gr.skip()
    return scenario, render(visit, _options(visit, step, 0, False, hardware, presenter, what_if=scenario), "roofline")


def prompt_lines(prompt: str | None) -> list[str]:
    """A batch's prompts: the prompt box's non-empty lines, one sequence each."""
    return [line for line in (prompt or "").splitlines() if line.strip()]


def scenario_from(batch: float | None, context: float | None, tokens: float | None, weights: str | None,
                  activations: str | None, kv: str | None, merged: bool, fused: bool, lm_head_all: bool) -> Scenario:
    """The what-if controls as a `Scenario`: a count that is empty (or not a whole number >= 1)
    and a format "as run" keep the step's own."""
    def count(value) -> int | None:
        return int(value) if isinstance(value, int | float) and math.isfinite(value) and value >= 1 else None

    def fmt(value) -> str | None:
        return value if value in DTYPE_BITS else None

    return Scenario(count(batch), count(context), count(tokens), fmt(weights), fmt(activations), fmt(kv),
                    bool(merged), bool(fused), bool(lm_head_all))


def on_sampling_change(visit: Visit | None, step: int | None, *controls):
    """Redraw the sampling view with the new settings (`controls`: the seven sampling values, then
    optionally the presenter flag) applied to the shown step's stored logits."""
    if not _open(visit):
        return gr.skip()
    sampling, presenter = controls[:SAMPLING_INPUTS], bool(controls[SAMPLING_INPUTS:] and controls[-1])
    try:
        settings = settings_from(*sampling)
    except SamplingSettingsError as exc:
        gr.Warning(toast_text(str(exc)))
        return gr.skip()
    return render(visit, _options(visit, step, 0, False, "", presenter), "sampling", preview=settings)


def step_outputs(visit: Visit, layer: int, average_heads: bool, hardware: str, shown: str,
                 presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None) -> tuple:
    """After a step: (visit, status, token strip, text, step menu, layer slider, the question on where
    to go on from (hidden where it was asked, or at a prefill), Reset's question (left as it is), *one
    per view), the latest step shown, the view `shown` drawn and the others left as they are."""
    traces = visit.run.steps
    latest = len(traces) - 1
    visit.viewing = None
    n_layers = len(traces[0].kv)
    layer = _index(layer, 0, n_layers - 1)
    options = ViewOptions(latest, layer, bool(average_heads), hardware, bool(presenter), _zoom(zoom),
                          what_if or Scenario(), visit.lens_stat, visit.sink_threshold)
    steps = gr.update(choices=[(step_label(t), t.step_index) for t in traces], value=latest)
    return (visit, status_text(visit, latest), strip_html(visit, latest), generated_text(visit, latest), steps,
            gr.update(maximum=n_layers - 1, value=layer), _hidden() if latest == 0 else _close_question(visit),
            _hidden() if latest == 0 else gr.skip(), *_views(visit, options, shown))


def _hidden() -> dict:
    return gr.update(visible=False)


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


def _replay_outputs(visit: Visit, layer: int, average_heads: bool, hardware: str, shown: str,
                    presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None) -> tuple:
    """`step_outputs` for a saved run, with every view drawn rather than the one on screen: a run
    that cannot be drawn is refused here, before it becomes the page's session.

    Raises:
        ConfigError: a view cannot be drawn from the run (the schema should have refused it).
    """
    text_outputs = list(step_outputs(visit, layer, average_heads, hardware, "", presenter, zoom)[: -len(VIEWS)])
    text_outputs[6:8] = [_hidden(), _hidden()]  # no question of the page's previous run stays open
    options = _options(visit, None, layer, average_heads, hardware, presenter, zoom, what_if)
    return (*text_outputs, *(_drawn_or_message(visit, options, view) for view in VIEWS))


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


def _views(visit: Visit, options: ViewOptions, shown: str) -> tuple:
    """The plot outputs, one per view: the figure of the view on screen, `gr.skip()` for the others."""
    return tuple(render(visit, options, view) if view == shown else gr.skip() for view in VIEWS)


def allowed_settings(settings: SamplingSettings, limits: Limits) -> SamplingSettings:
    """`settings` if within `limits`.

    Raises:
        SamplingSettingsError: more new tokens than the app allows.
    """
    if settings.max_new_tokens > limits.max_new_tokens:
        raise SamplingSettingsError(f"This explorer allows at most {limits.max_new_tokens} new tokens per session.")
    return settings


def _index(value: float | None, default: int, top: int) -> int:
    """A control's number as an index in [0, top]; `default` for an empty box, NaN or infinity."""
    if value is None or not math.isfinite(value):
        return default
    return max(0, min(int(value), top))


def _page(request: gr.Request | None) -> str:
    """The page's Gradio session hash ("local" when a handler is called directly, as in tests)."""
    return getattr(request, "session_hash", None) or "local"


def _session(visit: Visit | None) -> InferenceSession:
    if visit is None:
        raise SessionStateError("Run the prefill first: a decode step continues a prompt.")
    if not _open(visit):
        raise SessionStateError("This page's session was freed (the page showed no sign of life for a few "
                                "minutes, or its connection closed). Run the prefill again.")
    if visit.saved:
        raise SessionStateError("This is a saved run: there is no model to run. Press Prefill to start a live one.")
    return visit.session


def _open(visit: Visit | None) -> bool:
    """Whether the page holds a session not yet freed (a freed session keeps no traces)."""
    return visit is not None and visit.open


def _options(visit: Visit, step: int | None, layer: int, average_heads: bool, hardware: str,
             presenter: bool = False, zoom: str | None = None, what_if: Scenario | None = None) -> ViewOptions:
    latest = len(visit.run.steps) - 1
    step = _index(step, latest, latest)
    layer = _index(layer, 0, len(visit.run.steps[0].kv) - 1)
    scenario = what_if if isinstance(what_if, Scenario) else Scenario()
    return ViewOptions(step, layer, bool(average_heads), hardware, bool(presenter), _zoom(zoom), scenario,
                       visit.lens_stat, visit.sink_threshold)


def _zoom(value: str | float | None) -> int | None:
    """The attention zoom box as a first token; None (the whole matrix) for an empty box or anything
    that is not a whole number."""
    try:
        return max(0, int(str(value).strip()))
    except ValueError:
        return None
