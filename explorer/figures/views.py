"""The seven views, each a pure function of one shape: `fig_<view>(data, options) -> go.Figure`.

`ViewData` is everything a view draws: the `Run`, plus what the handler fetched for the view on
screen before drawing (the shown layer's attention blocks, the steps' costs, the roofline's machine,
a sampling preview). A view runs no model, probes no machine and keeps no state, so every view can
be drawn from a hand-built run, a live one or one read back from a file, and gives the same figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import Scenario, StepCosts
from explorer.analysis.records import OpCost
from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD, SinkSummary, first_token_importance
from explorer.families import FAMILIES
from explorer.figures.attention import attention_figure
from explorer.figures.experts import add_routing_panel
from explorer.figures.forward import forward_figure
from explorer.figures.journey import journey_figure
from explorer.figures.kv_cache import kv_cache_figure
from explorer.figures.lens import LensColumns, lens_figure
from explorer.figures.roofline import roofline_figure
from explorer.figures.sampling import same_sampling, sampling_figure
from explorer.figures.theme import empty_figure, presenter_style
from explorer.run import Run
from explorer.trace import LensRecord, SamplingRecord

VIEWS = ("forward", "journey", "attention", "kv_cache", "sampling", "roofline", "lens")
# The attention window drawn at full resolution: 48^2 cells x 32 heads (Qwen3-8B) stay under ~400 KB.
ZOOM_TOKENS = 48
NO_VALUES = "Shape-only mode: the model has no weights, so there are no {} to show (shapes and costs only)."


@dataclass(frozen=True)
class ViewOptions:
    """The view controls.

    Attributes:
        step: the step shown (0 = prefill, k = k-th decode step), within the run's steps.
        layer: the decoder layer of the journey and attention views, within the model's layers.
        average_heads: draw the mean over query heads instead of one panel per head.
        hardware: the roofline's machine: a catalogue key or "this-machine".
        presenter: larger text and stronger contrast, for a projector.
        zoom: first token of a `ZOOM_TOKENS`-token window of the attention matrix drawn at full
            resolution; None draws the whole matrix (pooled when it is long).
        what_if: the roofline's what-if (batch, context, formats, engine choices); empty: the run's own.
        lens_stat: what colours the logit lens's cells (`explorer.figures.lens.LENS_STATS`).
        sink_threshold: the attention view marks a head as a sink where its first token's importance
            exceeds this.
    """

    step: int
    layer: int
    average_heads: bool
    hardware: str
    presenter: bool = False
    zoom: int | None = None
    what_if: Scenario = Scenario()
    lens_stat: str = "top1"
    sink_threshold: float = DEFAULT_SINK_THRESHOLD


@dataclass(frozen=True)
class AttentionRows:
    """The query rows of a layer's stacked causal matrix (`stack_attention`) that the attention view draws.

    Attributes:
        values: [h_q, rows, n] float32 probabilities, NaN above the causal diagonal; with `key_factor`
            > 1, [h_q, rows, ceil(n / key_factor)] key-block masses (`explorer.analysis.pooling`).
        first_row: the absolute position of the first row (0: the whole matrix; a zoom window's start).
        key_factor: tokens per pooled block, 1 where `values` are probabilities.
    """

    values: np.ndarray
    first_row: int = 0
    key_factor: int = 1


@dataclass(frozen=True)
class ViewData:
    """What a view draws.

    Attributes:
        run: the steps.
        attention: attention view: the shown layer's attention up to the shown step, whole, pooled or
            a zoom window's rows; None in shape-only mode.
        costs: roofline view: the prefill's `StepCosts`, then the shown decode step's (if one is shown),
            under the what-if where one is set; empty where the cost model does not know the family.
        executed: roofline view, with a what-if: the steps' own `StepCosts`, for comparison.
        sweeps: roofline view: ("batch", the decode step's costs as B goes 1 -> 256) and ("context",
            its costs as n grows), each a tuple of `StepCosts`.
        hardware: roofline view: the machine.
        measured: roofline view: the steps ran on `hardware`, so their measured points belong on it.
        measured_roofs: roofline view, where `hardware` is the datasheet entry of the device the steps
            ran on: that device's roofs as the probe measured them, drawn beside the datasheet's.
        preview: sampling view: the shown step's stored logits sampled again with other settings.
        stop_costs: forward-pass view: the analytic cost of each stop of the shown layer and outside
            the layers, by canonical name, for the prefill then the shown decode step; empty where
            the cost model does not know the family.
        sinks: attention view: the first token's importance for every layer and head at the shown
            step ([L, h]); None where not every layer's attention is at hand.
        lens: lens view: the logit lens of each step up to the shown one (`Run.lens`; None for a step
            without one).
    """

    run: Run
    attention: AttentionRows | None = None
    costs: tuple[StepCosts, ...] = ()
    executed: tuple[StepCosts, ...] = ()
    sweeps: tuple[tuple[str, tuple[StepCosts, ...]], ...] = ()
    hardware: Hardware | None = None
    measured: bool = False
    measured_roofs: Hardware | None = None
    preview: SamplingRecord | None = None
    stop_costs: tuple[dict[str, OpCost], ...] = ()
    lens: tuple[LensRecord | None, ...] = ()
    sinks: np.ndarray | None = None


def fig_forward(data: ViewData, options: ViewOptions) -> go.Figure:
    """The shown layer as a data-flow diagram, the prefill's measured shapes beside the shown step's; a
    mixture-of-experts layer adds its routing under it (`explorer.figures.experts.add_routing_panel`)."""
    decode = data.run.step(options.step) if options.step > 0 else None
    config = data.run.config
    figure = forward_figure(data.run.steps[0], decode, options.layer, len(data.run.steps[0].kv),
                            tied_lm_head=bool(config.get("tie_word_embeddings")), costs=data.stop_costs,
                            presenter=options.presenter, family=FAMILIES.get(config.get("model_type")))
    shown = decode or data.run.steps[0]
    router = next((op for op in shown.ops if op.name == f"layers.{options.layer}.mlp.router"), None)
    if router is None:  # a dense layer
        return figure
    logits, choices = router.output_shapes[0], router.output_shapes[1]  # [B*T, E], [B*T, k]
    return add_routing_panel(figure, list(data.run.steps[: shown.step_index + 1]), options.layer,
                             data.run.pieces_until(shown.step_index), logits[-1], choices[-1])


def query_heads(config: dict) -> int:
    """h_q from a config as transformers writes it (`num_attention_heads`; GPT-2: `n_head`).

    Raises:
        KeyError: neither field is there.
    """
    return config["n_head"] if "num_attention_heads" not in config and "n_head" in config else \
        config["num_attention_heads"]


def fig_journey(data: ViewData, options: ViewOptions) -> go.Figure:
    """The stops of one layer, prefill beside the shown decode step (none while the prefill is shown)."""
    decode = data.run.step(options.step) if options.step > 0 else None
    return journey_figure(data.run.steps[0], decode, options.layer, FAMILIES.get(data.run.config.get("model_type")))


def fig_attention(data: ViewData, options: ViewOptions) -> go.Figure:
    """The layer's causal attention up to the shown step: the prefill triangle plus a row per step;
    with `options.zoom`, a `ZOOM_TOKENS`-token window of it at full resolution."""
    trace = data.run.step(options.step)
    if trace.shape_only or data.attention is None:
        return empty_figure("attention", NO_VALUES.format("attention probabilities"))
    shown, pieces = data.attention, data.run.pieces_until(trace.step_index)
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


def zoom_window(zoom: int, n: int) -> tuple[int, int]:
    """The `ZOOM_TOKENS`-token window of n tokens drawn for a zoom from token `zoom` (kept inside 0..n)."""
    start = max(0, min(zoom, n - ZOOM_TOKENS))
    return start, min(start + ZOOM_TOKENS, n)


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


def fig_kv_cache(data: ViewData, options: ViewOptions) -> go.Figure:
    """Every layer's KV cache over the steps up to the shown one, against an MHA model's."""
    trace = data.run.step(options.step)
    n_heads = query_heads(data.run.config)
    return kv_cache_figure(list(data.run.steps[: trace.step_index + 1]), n_heads, trace.step_index)


def fig_sampling(data: ViewData, options: ViewOptions) -> go.Figure:
    """How the shown step chose its token, from its own record; with `data.preview` (other settings on
    the same stored logits), that preview, titled so, the step's own draw still named and marked. A
    preview whose settings choose as the step's did (`same_sampling`) is the step: its record is drawn."""
    trace = data.run.step(options.step)
    if trace.sampling is None:
        return empty_figure("sampling", NO_VALUES.format("logits"))
    own, preview = trace.sampling, data.preview
    if preview is None or same_sampling(preview.settings, own.settings):
        return sampling_figure(own, data.run.piece, trace.step_index)
    return sampling_figure(preview, data.run.piece, trace.step_index, own=own)


def fig_roofline(data: ViewData, options: ViewOptions) -> go.Figure:
    """The operators of the prefill and the shown decode step on the chosen machine's roofline;
    measured points where the machine is the one the steps ran on."""
    if not data.costs or data.hardware is None:
        return empty_figure("roofline", "The cost model does not know this model family.")
    return roofline_figure(list(data.costs), data.hardware, data.run.step(options.step).step_index,
                           measured=data.measured and not options.what_if.active, executed=list(data.executed),
                           changes=options.what_if.changes(), sweeps=data.sweeps,
                           measured_roofs=data.measured_roofs)


def fig_lens(data: ViewData, options: ViewOptions) -> go.Figure:
    """Every layer's prediction at each position up to the shown step (the prefill's positions, then one
    per decode step), from `data.lens`."""
    trace = data.run.step(options.step)
    if trace.shape_only:
        return empty_figure("lens", NO_VALUES.format("logits"))
    records = data.lens
    if len(records) != trace.step_index + 1 or any(record is None for record in records):
        return empty_figure("lens", "This run was saved without its logit lens.")
    columns = LensColumns.join(records)
    return lens_figure(columns, data.run.pieces_until(trace.step_index), data.run.piece, options.lens_stat,
                       trace.step_index, records[0].positions[0])


FIGURES = {"forward": fig_forward, "journey": fig_journey, "attention": fig_attention, "kv_cache": fig_kv_cache,
           "sampling": fig_sampling, "roofline": fig_roofline, "lens": fig_lens}


def draw(view: str, data: ViewData, options: ViewOptions) -> go.Figure:
    """The figure of `view` (one of `VIEWS`), in presenter style where `options.presenter`.

    Its `layout.uirevision` names the model, view, layer and presenter mode: a zoom or pan the person
    made survives the next step's redraw (plotly.js keeps it while the uirevision is unchanged) and is
    dropped when one of those changes.
    """
    figure = FIGURES[view](data, options)
    figure.layout.uirevision = f"{data.run.model}|{view}|layer {options.layer}|presenter {options.presenter}"
    return presenter_style(figure) if options.presenter else figure
