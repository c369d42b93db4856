"""The five views of a visitor's session, each a Plotly figure drawn from the session's traces.

A `Visit` is what one browser tab holds (in `gr.State`): its inference session and the analysis
spec of its model. `ViewOptions` are the view controls (step, layer, heads averaged, hardware).
Drawing does not run the model: attention a long session did not keep within its memory budget is
recomputed from its kept queries and KV cache (`InferenceSession.attention_probs`; only a
sliding-window layer that dropped early keys reruns the context).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.hardware import THIS_MACHINE, get_hardware
from explorer.analysis.spec import ModelSpec
from explorer.config import SamplingSettings
from explorer.errors import ConfigError
from explorer.figures.attention import attention_figure, stack_attention
from explorer.figures.journey import journey_figure
from explorer.figures.kv_cache import kv_cache_figure
from explorer.figures.roofline import roofline_figure
from explorer.figures.sampling import sampling_figure
from explorer.figures.theme import empty_figure, plain_label, presenter_style
from explorer.runner.devices import roofline_hardware_key
from explorer.runner.sampling import resample
from explorer.runner.session import InferenceSession
from explorer.trace import SamplingRecord, StepTrace
from explorer.ui.export import remove_export
from explorer.ui.hosting import Limits
from explorer.ui.saved import SavedSession

VIEWS = ("journey", "attention", "kv_cache", "sampling", "roofline")
# The attention window drawn at full resolution: 48^2 cells x 32 heads (Qwen3-8B) stay under ~400 KB.
ZOOM_TOKENS = 48
# A recomputed prefill attention block the visit keeps (float32; SmolLM2 up to about 1,400 prompt tokens).
PREFILL_ATTENTION_CACHE_BYTES = 64 * 2**20
NO_VALUES = "Shape-only mode: the model has no weights, so there are no {} to show (shapes and costs only)."


@dataclass
class Visit:
    """One visitor's inference.

    Attributes:
        session: the inference session (ids, KV cache, traces, sampling generator), or a saved run.
        limits: what the app allows this visitor.
        model_name: the model's name ("smollm2-135m-instruct", a hub id, a folder, a preset).
        description: one line on the model and its weights.
        config: the model's Hugging Face config as a dict.
        spec: the model as the cost model sees it; None for a family it does not know (no roofline).
        export_path: the page's latest export on disk (`explorer.ui.export`), deleted with the visit.
    """

    session: InferenceSession | SavedSession
    limits: Limits
    model_name: str
    description: str
    config: dict
    spec: ModelSpec | None = None
    export_path: Path | None = field(default=None, init=False, repr=False)
    _prefill_attention: tuple[int, np.ndarray] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            self.spec = ModelSpec.from_hf_config(self.config)
        except ConfigError:
            self.spec = None

    @classmethod
    def start(cls, session: InferenceSession, limits: Limits) -> Visit:
        """A visit over a live session."""
        loaded = session.loaded
        return cls(session, limits, loaded.name, loaded.description, loaded.model.config.to_dict())

    @classmethod
    def replay(cls, saved: SavedSession, limits: Limits) -> Visit:
        """A visit over a saved run (no model)."""
        return cls(saved, limits, saved.model_name, saved.description, saved.config)

    def close(self) -> None:
        """Free the session's KV cache and traces, and delete its export (the page closed or started over)."""
        self._prefill_attention = None
        remove_export(self.export_path)
        self.export_path = None
        self.session.close()

    def prefill_attention(self, layer: int) -> np.ndarray:
        """The prefill's attention in `layer`, [h_q, T, T] float32; a block the session gave up is
        recomputed once and kept (the most recent layer only, up to `PREFILL_ATTENTION_CACHE_BYTES`),
        so redrawing after each decode step does not recompute it."""
        if self._prefill_attention is not None and self._prefill_attention[0] == layer:
            return self._prefill_attention[1]
        probs = self.session.attention_probs(0, layer)
        if self.traces[0].attention[layer].probs is None and probs.nbytes <= PREFILL_ATTENTION_CACHE_BYTES:
            self._prefill_attention = (layer, probs)
        return probs

    @property
    def traces(self) -> list[StepTrace]:
        """The session's traces: prefill, then each decode step."""
        return self.session.traces

    def trace(self, step: int) -> StepTrace:
        """The trace of step `step` (0 = prefill), clamped to the steps run so far."""
        return self.traces[max(0, min(step, len(self.traces) - 1))]

    def pieces_until(self, step: int) -> list[str]:
        """The token pieces the model has seen up to and including step `step` (n of them)."""
        traces = self.traces[: step + 1]
        return [piece for trace in traces for piece in trace.input_pieces]

    def piece(self, token_id: int) -> str:
        """A token id decoded alone."""
        return self.session.pieces([token_id])[0]


@dataclass(frozen=True)
class ViewOptions:
    """The view controls.

    Attributes:
        step: the step shown (0 = prefill, k = k-th decode step).
        layer: the decoder layer of the journey and attention views.
        average_heads: draw the mean over query heads instead of one panel per head.
        hardware: the roofline's machine: a catalogue key or "this-machine".
        presenter: larger text and stronger contrast, for a projector.
        zoom: first token of a `ZOOM_TOKENS`-token window of the attention matrix drawn at full
            resolution; None draws the whole matrix (pooled when it is long).
    """

    step: int
    layer: int
    average_heads: bool
    hardware: str
    presenter: bool = False
    zoom: int | None = None


def render(visit: Visit, options: ViewOptions, view: str, preview: SamplingSettings | None = None) -> go.Figure:
    """The figure of one view ("journey", "attention", "kv_cache", "sampling" or "roofline"); for
    the sampling view, `preview` applies other settings to the step's stored logits."""
    figure = sampling_view(visit, options, preview) if view == "sampling" else RENDERERS[view](visit, options)
    return presenter_style(figure) if options.presenter else figure


def journey_view(visit: Visit, options: ViewOptions) -> go.Figure:
    """The stops of one layer, prefill beside the shown decode step (none while the prefill is shown)."""
    decode = visit.trace(options.step) if options.step > 0 else None
    return journey_figure(visit.traces[0], decode, options.layer)


def attention_view(visit: Visit, options: ViewOptions) -> go.Figure:
    """The layer's causal attention up to the shown step: the prefill triangle plus a row per step;
    with `options.zoom`, a `ZOOM_TOKENS`-token window of it at full resolution."""
    trace = visit.trace(options.step)
    if trace.shape_only:
        return empty_figure("attention", NO_VALUES.format("attention probabilities"))
    blocks = [visit.prefill_attention(options.layer)]
    blocks += [visit.session.attention_probs(step, options.layer) for step in range(1, trace.step_index + 1)]
    probs, pieces = stack_attention(blocks), visit.pieces_until(trace.step_index)
    new_rows = min(trace.step_index, 1)
    start = None
    if options.zoom is not None:
        start = max(0, min(options.zoom, len(pieces) - ZOOM_TOKENS))
        stop = start + ZOOM_TOKENS
        probs, new_rows = probs[:, start:stop, start:stop], new_rows if stop >= len(pieces) else 0
        pieces = pieces[start:stop]
    n_kv_heads = trace.kv[options.layer].key_shape[1]
    return attention_figure(probs, pieces, n_kv_heads, options.layer, trace.step_index, new_rows=new_rows,
                            average=options.average_heads, window_start=start)


def kv_cache_view(visit: Visit, options: ViewOptions) -> go.Figure:
    """Every layer's KV cache over the steps up to the shown one, against an MHA model's."""
    trace = visit.trace(options.step)
    n_heads = visit.config["num_attention_heads"]
    return kv_cache_figure(visit.traces[: trace.step_index + 1], n_heads, trace.step_index)


def sampling_view(visit: Visit, options: ViewOptions, preview: SamplingSettings | None = None) -> go.Figure:
    """How the shown step chose its token; with `preview`, what those settings would do to the same
    stored logits (the model is not run)."""
    trace = visit.trace(options.step)
    if trace.sampling is None:
        return empty_figure("sampling", NO_VALUES.format("logits"))
    record = trace.sampling if preview is None else preview_record(visit, trace, preview)
    fig = sampling_figure(record, visit.piece, trace.step_index)
    if preview is not None and preview.to_dict() != trace.sampling.settings:
        drawn = plain_label(repr(visit.piece(trace.sampling.token_id)))
        fig.update_layout(title_text=f"{fig.layout.title.text} · preview: the step drew {drawn} with its own settings")
    return fig


def preview_record(visit: Visit, trace: StepTrace, settings: SamplingSettings) -> SamplingRecord:
    """Sampling re-run on the step's stored logits with `settings` (seeded by `settings.seed`)."""
    context = visit.session.ids[: trace.context_length]
    return resample(trace.logits, context, settings, settings.seed)


def roofline_view(visit: Visit, options: ViewOptions) -> go.Figure:
    """The operators of the prefill and the shown decode step on the chosen machine's roofline;
    measured points where the machine is the one the steps ran on."""
    if visit.spec is None:
        return empty_figure("roofline", "The cost model does not know this model family.")
    trace = visit.trace(options.step)
    decode = trace if trace.step_index > 0 else None
    return roofline_figure(visit.spec, visit.traces[0], decode, get_hardware(options.hardware),
                           trace.step_index, measured=_measured_on(visit, trace.device, options.hardware))


def _measured_on(visit: Visit, device: str, hardware: str) -> bool:
    """Whether the step's measured points belong on `hardware`'s roofline: it is the machine the step
    ran on. A saved run's GPU cannot be named here (this machine may have none, or another), so its
    measured points show only for a CPU or MPS run on "this-machine"."""
    if device == "meta":
        return False
    if isinstance(visit.session, SavedSession):
        return not device.startswith("cuda") and hardware == THIS_MACHINE
    return hardware == roofline_hardware_key(device)


RENDERERS = {"journey": journey_view, "attention": attention_view, "kv_cache": kv_cache_view,
             "sampling": sampling_view, "roofline": roofline_view}
