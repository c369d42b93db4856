"""The seven views, one row each of `VIEW_TABLE`: its name, its data type, the function that fetches
that data from a run (`explorer.figures.view_fetch`) and its `fig_<view>(data, options) -> go.Figure`.

Adding a view is one row and two functions. A view runs no model, probes no machine and keeps no
state: what it needs from the runner is fetched before drawing, through the services its front end
lends (`ViewSources`), so every view can be drawn from a hand-built run, a live one or one read back
from a file, and gives the same figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.sinks import SinkSummary, first_token_importance
from explorer.figures.attention import attention_figure, zoom_window
from explorer.figures.experts import add_routing_panel
from explorer.figures.forward import forward_figure
from explorer.figures.journey import journey_figure
from explorer.figures.kv_cache import kv_cache_figure
from explorer.figures.lens import LensColumns, lens_figure
from explorer.figures.roofline import roofline_figure
from explorer.figures.sampling import same_sampling, sampling_figure
from explorer.figures.theme import empty_figure, presenter_style
from explorer.figures.view_fetch import attention_data, forward_data, lens_data, roofline_data, run_data, sampling_data
from explorer.figures.view_types import (
    AttentionData,
    ForwardData,
    LensData,
    RooflineData,
    RunData,
    SamplingData,
    ViewOptions,
    ViewSources,
)
from explorer.run import Run

UNKNOWN_FAMILY = "A model family the explorer does not know: its heads and cache layout are not known."
NO_VALUES = "Shape-only mode: the model has no weights, so there are no {} to show (shapes and costs only)."
SEQUENCE_0_ENDED = ("Sequence 0 has ended (end-of-sequence): it is fed the pad id while the batch's other "
                    "sequences run on, so this step draws no token for it.")


def fig_forward(data: ForwardData, options: ViewOptions) -> go.Figure:
    """The shown layer as a data-flow diagram, the prefill's measured shapes beside the shown step's; a
    mixture-of-experts layer adds its routing under it (`explorer.figures.experts.add_routing_panel`)."""
    decode = data.run.step(options.step) if options.step > 0 else None
    spec = data.run.spec
    figure = forward_figure(data.run.steps[0], decode, options.layer, len(data.run.steps[0].kv),
                            tied_lm_head=bool(spec and spec.tie_word_embeddings), costs=data.stop_costs,
                            presenter=options.presenter, family=spec.arch if spec else None)
    shown = decode or data.run.steps[0]
    router = next((op for op in shown.ops if op.name == f"layers.{options.layer}.mlp.router"), None)
    if router is None:  # a dense layer
        return figure
    logits, choices = router.output_shapes[0], router.output_shapes[1]  # [B*T, E], [B*T, k]
    return add_routing_panel(figure, list(data.run.steps[: shown.step_index + 1]), options.layer,
                             data.run.pieces_until(shown.step_index), logits[-1], choices[-1])


def fig_journey(data: RunData, options: ViewOptions) -> go.Figure:
    """The stops of one layer, prefill beside the shown decode step (none while the prefill is shown)."""
    decode = data.run.step(options.step) if options.step > 0 else None
    spec = data.run.spec
    return journey_figure(data.run.steps[0], decode, options.layer, spec.arch if spec else None)


def fig_attention(data: AttentionData, options: ViewOptions) -> go.Figure:
    """The layer's causal attention up to the shown step: the prefill triangle plus a row per step;
    with `options.zoom`, a `ZOOM_TOKENS`-token window of it at full resolution."""
    trace = data.run.step(options.step)
    if trace.shape_only or data.rows is None:
        return empty_figure("attention", NO_VALUES.format("attention probabilities"))
    shown, pieces = data.rows, data.run.pieces_until(trace.step_index)
    window = zoom_window(options.zoom, len(pieces)) if options.zoom is not None else None
    n_kv_heads = trace.kv[options.layer].key_shape[1]
    # the first token's importance per head of this layer: the run's sums, else from the whole matrix
    whole = shown.first_row == 0 and shown.key_factor == 1 and shown.values.shape[1] == len(pieces)
    importance = data.sinks[options.layer] if data.sinks is not None else \
        first_token_importance(shown.values) if whole else None
    threshold = options.sink_threshold
    notes = None if importance is None else \
        [f" · sink {value:.2f}{' ●' if value > threshold else ''}" for value in importance]
    return attention_figure(shown.values, pieces, n_kv_heads, options.layer, trace.step_index,
                            new_rows=min(trace.step_index, 1), average=options.average_heads, window=window,
                            presenter=options.presenter, head_notes=notes,
                            note=() if importance is None else sink_note(importance, data.sinks, threshold),
                            first_row=shown.first_row, key_factor=shown.key_factor)


def sink_note(importance: np.ndarray, every_layer: np.ndarray | None, threshold: float) -> list[str]:
    """The attention view's title segments on sinks: how many of the layer's heads, and of all (layer,
    head) pairs, put a mean weight over `threshold` on the first token (computed from the probabilities)."""
    here = int((importance > threshold).sum())
    segments = [f"Sinks ● (mean weight on token 0 over the queries > {threshold:g}):",
                f"{here} of {len(importance)} heads here"]
    if every_layer is not None:
        summary = SinkSummary(every_layer, threshold)
        counts = summary.per_layer()
        segments[-1] += ";"
        segments += [f"{int(summary.sinks.sum())} of {summary.sinks.size} ({summary.share:.0%}) in all layers,",
                     f"per layer {counts.min()}-{counts.max()} of {every_layer.shape[1]}"]
    return segments


def fig_kv_cache(data: RunData, options: ViewOptions) -> go.Figure:
    """Every layer's KV cache over the steps up to the shown one, against an MHA model's."""
    trace, spec = data.run.step(options.step), data.run.spec
    if spec is None:
        return empty_figure("kv_cache", UNKNOWN_FAMILY)
    return kv_cache_figure(list(data.run.steps[: trace.step_index + 1]), spec.n_heads, trace.step_index)


def fig_sampling(data: SamplingData, options: ViewOptions) -> go.Figure:
    """How the shown step chose its token, from its own record; with `data.preview` (other settings on
    the same stored logits), that preview, titled so, the step's own draw still named and marked. A
    preview whose settings choose as the step's did (`same_sampling`) is the step: its record is drawn."""
    trace = data.run.step(options.step)
    if trace.sampling is None:
        return empty_figure("sampling", NO_VALUES.format("logits") if trace.shape_only else SEQUENCE_0_ENDED)
    own, preview = trace.sampling, data.preview
    if preview is None or same_sampling(preview.settings, own.settings):
        return sampling_figure(own, data.run.piece, trace.step_index)
    return sampling_figure(preview, data.run.piece, trace.step_index, own=own)


def fig_roofline(data: RooflineData, options: ViewOptions) -> go.Figure:
    """The operators of the prefill and the shown decode step on the chosen machine's roofline;
    measured points where the machine is the one the steps ran on."""
    if not data.costs or data.hardware is None:
        return empty_figure("roofline", "The cost model does not know this model family.")
    return roofline_figure(list(data.costs), data.hardware, data.run.step(options.step).step_index,
                           measured=data.measured and not options.what_if.active, executed=list(data.executed),
                           changes=options.what_if.changes(), sweeps=data.sweeps,
                           measured_roofs=data.measured_roofs, collectives=list(data.collectives))


def fig_lens(data: LensData, options: ViewOptions) -> go.Figure:
    """Every layer's prediction at each position up to the shown step (the prefill's positions, then one
    per decode step), from `data.lens`."""
    trace = data.run.step(options.step)
    if trace.shape_only:
        return empty_figure("lens", NO_VALUES.format("logits"))
    # a batch whose sequence 0 ended is fed the pad id after: its lens covers the steps until then
    ended = next((s.step_index for s in data.run.steps[1:trace.step_index + 1] if s.sampling is None), None)
    records = data.lens[:ended]
    if len(records) != (ended or trace.step_index + 1) or any(record is None for record in records):
        return empty_figure("lens", "This run was saved without its logit lens.")
    columns = LensColumns.join(records)
    return lens_figure(columns, data.run.pieces_until(len(records) - 1), data.run.piece, options.lens_stat,
                       trace.step_index, records[0].positions[0], ended_at=None if ended is None else ended - 1)


@dataclass(frozen=True)
class View:
    """One view: a row of `VIEW_TABLE`.

    Attributes:
        name: the view's key (the app's tab, `Explorer.figure`'s `view`, the figure's `layout.meta`).
        title: its name on the app's tab.
        data: the type its data comes in (`explorer.figures.view_types`).
        fetch: (run, sources, options) -> its data: what it needs, fetched from the run and the
            front end's sources (attention, the runner's services).
        fig: (data, options) -> its figure.
    """

    name: str
    title: str
    data: type[RunData]
    fetch: Callable[[Run, ViewSources, ViewOptions], Any]
    fig: Callable[[Any, ViewOptions], go.Figure]


VIEW_TABLE = {view.name: view for view in (
    View("forward", "Forward pass", ForwardData, forward_data, fig_forward),
    View("journey", "Journey", RunData, run_data, fig_journey),
    View("attention", "Attention", AttentionData, attention_data, fig_attention),
    View("kv_cache", "KV cache", RunData, run_data, fig_kv_cache),
    View("sampling", "Sampling", SamplingData, sampling_data, fig_sampling),
    View("roofline", "Roofline", RooflineData, roofline_data, fig_roofline),
    View("lens", "Logit lens", LensData, lens_data, fig_lens),
)}
VIEWS = tuple(VIEW_TABLE)


def draw(view: str, data: RunData, options: ViewOptions) -> go.Figure:
    """The figure of `view` (one of `VIEWS`) from its data, in presenter style where `options.presenter`.

    Its `layout.uirevision` names the model, view, layer and presenter mode: a zoom or pan the person
    made survives the next step's redraw (plotly.js keeps it while the uirevision is unchanged) and is
    dropped when one of those changes.
    """
    figure = VIEW_TABLE[view].fig(data, options)
    figure.layout.uirevision = f"{data.run.model}|{view}|layer {options.layer}|presenter {options.presenter}"
    return presenter_style(figure) if options.presenter else figure


def render(run: Run, sources: ViewSources, options: ViewOptions, view: str) -> go.Figure:
    """The figure of `view` (one of `VIEWS`) at `options`: its data fetched from the run and `sources`,
    then drawn.

    Raises:
        SessionStateError: a saved run holds no attention for the shown layer and steps.
        ConfigError: the roofline's machine is unknown.
    """
    return draw(view, VIEW_TABLE[view].fetch(run, sources, options), options)
