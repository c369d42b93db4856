"""A mixture-of-experts layer's routing, drawn under the forward view's diagram of that layer.

Two panels share the experts' axis: how many token rows each expert got at the shown step (bars:
`RoutingRecord.tokens_per_expert`, the rows of that expert's GEMMs, counted from the router's measured
choices) beside the expected load B*T*k/E of uniform routing (a dashed line), and which experts each
token went to (a heatmap, a row per token of sequence 0 from the prompt to the shown step, each cell
the weight the router gave that expert, blank where it did not choose it). A shape-only run has no
values to route by: the bars are the expected load, and there is no heatmap. Pure: plain traces in,
Plotly out.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.theme import plain_label, set_layout
from explorer.journey import step_label
from explorer.stop_names import stop_name
from explorer.trace import RoutingRecord, StepTrace

PANEL_GAP_PX = 70  # between the diagram and the panels: the bars' title sits in it
BARS_PX = 110
ROW_PX = 14  # a heatmap row per token
AXIS_PX = 48  # the experts' axis between the bars and the heatmap
MAX_HEATMAP_PX = 320
BAR_COLOUR = "#0072B2"
EXPECTED_COLOUR = "#D55E00"
WEIGHT_COLOURS = [[0, "#c6dbef"], [1, "#08306b"]]  # the lightest chosen cell stays visible against a blank one


def routing_of(trace: StepTrace, layer: int) -> RoutingRecord | None:
    """The step's routing record of `layer`; None for a dense layer or a step without routing."""
    return next((record for record in trace.routing if record.layer == layer), None)


def token_weights(steps: list[StepTrace], layer: int) -> np.ndarray:
    """[n, E] float: for each token of sequence 0 fed up to the last of `steps`, the router's weight on
    each expert, NaN where the token did not go to it (each row has k numbers).

    Raises:
        ValueError: a step has no routing for `layer`.
    """
    rows = []
    for trace in steps:
        record = routing_of(trace, layer)
        if record is None:
            raise ValueError(f"Step {trace.step_index} has no routing for layer {layer}.")
        grid = np.full((len(trace.input_ids), record.n_experts), np.nan)
        ids = np.asarray(record.expert_ids[: len(trace.input_ids)])  # sequence 0's rows come first
        np.put_along_axis(grid, ids, record.weights[: len(trace.input_ids)], axis=1)
        rows.append(grid)
    return np.concatenate(rows)


def add_routing_panel(fig: go.Figure, steps: list[StepTrace], layer: int, pieces: list[str],
                      experts: int, per_token: int) -> go.Figure:
    """Add the routing panels under the forward figure `fig` (in place), for `layer` at the last of `steps`.

    Args:
        fig: the forward view's figure (its diagram on the "x"/"y" axes).
        steps: the prefill up to the shown step.
        layer: a mixture-of-experts layer.
        pieces: the text pieces of the tokens fed up to the shown step (`Run.pieces_until`).
        experts: E, the layer's experts (from the router's logits [B*T, E]).
        per_token: k, experts per token.

    Returns:
        `fig`, taller by the panels: a bar trace "tokens per expert" (x the expert index, y the rows, `meta`
        "measured" or "expected"), a line "expected B·T·k/E", and with routing a heatmap "routing weights"
        (y the tokens, x the experts).
    """
    shown = steps[-1]
    rows = shown.op(stop_name(layer, "mlp.router")).input_shapes[0][0]  # B*T
    expected = rows * per_token / experts
    record = routing_of(shown, layer)
    weights = token_weights(steps, layer) if record and all(routing_of(s, layer) for s in steps) else None
    heatmap_px = (min(MAX_HEATMAP_PX, ROW_PX * len(pieces)) if weights is not None else 0) + AXIS_PX
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    total = plot_px + PANEL_GAP_PX + BARS_PX + heatmap_px
    below, bars_bottom = (BARS_PX + heatmap_px) / total, heatmap_px / total
    fig.layout.yaxis.domain = [below + PANEL_GAP_PX / total, 1]
    fig.layout.height = fig.layout.height + PANEL_GAP_PX + BARS_PX + heatmap_px
    fig.add_traces(_load_traces(record, experts, per_token, rows))
    span = {"domain": [0.06, 0.98], "range": [-0.5, experts - 0.5]}
    layout = {"xaxis2": {**span, "anchor": "y2", "showticklabels": weights is None,
                         "title": {"text": "expert" if weights is None else ""}},
              "yaxis2": {"domain": [bars_bottom + (AXIS_PX / total if weights is not None else 0), below],
                         "anchor": "x2", "title": {"text": "token rows"}, "rangemode": "tozero"}}
    if weights is not None:
        fig.add_trace(_heatmap(weights, pieces))
        layout |= {"xaxis3": {**span, "anchor": "y3", "side": "top", "dtick": 1 if experts <= 32 else None,
                              "title": {"text": "expert: below, which experts each token went to (the router's "
                                                "weight)", "standoff": 4}},
                   "yaxis3": {"domain": [0, bars_bottom - AXIS_PX / total], "anchor": "x3", "autorange": "reversed",
                              "tickmode": "array", "tickvals": list(range(len(pieces))),
                              "ticktext": [_tick(piece) for piece in pieces], "tickfont": {"size": 10}}}
    source = "counted from the router's measured choices" if record else "expected: shape-only mode routes nothing"
    title = (f"<b>Layer {layer} experts</b> at {step_label(shown)}: the token rows each expert got ({source})<br>"
             f"E = {experts} experts, k = {per_token} per token; an expert's GEMMs run on its rows · "
             f"dashed: B·T·k/E = {expected:.3g}")
    note = {"text": title, "x": 0.06, "y": below, "xref": "paper", "yref": "paper", "xanchor": "left",
            "yanchor": "bottom", "yshift": 8, "showarrow": False, "font": {"size": 13}, "align": "left"}
    return set_layout(fig, **layout, annotations=[*fig.layout.annotations, note])


def _load_traces(record: RoutingRecord | None, experts: int, per_token: int, rows: int) -> list:
    """The bars (measured tokens per expert, or the expected load) and the dashed B·T·k/E line."""
    expected = rows * per_token / experts
    counts = record.tokens_per_expert if record is not None else [expected] * experts
    bars = go.Bar(x=list(range(experts)), y=counts, name="tokens per expert", marker_color=BAR_COLOUR,
                  xaxis="x2", yaxis="y2", meta="measured" if record is not None else "expected",
                  hovertemplate="expert %{x}: %{y} token rows<extra></extra>")
    line = go.Scatter(x=[-0.5, experts - 0.5], y=[expected, expected], mode="lines", name="expected B·T·k/E",
                      line={"color": EXPECTED_COLOUR, "dash": "dash"}, xaxis="x2", yaxis="y2",
                      hovertemplate=f"uniform routing: B·T·k/E = {rows}·{per_token}/{experts} = {expected:.3g} "
                                    "rows<extra></extra>")
    return [bars, line]


def _heatmap(weights: np.ndarray, pieces: list[str]) -> go.Heatmap:
    hover = [[f"token {t} {plain_label(repr(pieces[t]))} → expert {e}" for e in range(weights.shape[1])]
             for t in range(weights.shape[0])]
    return go.Heatmap(z=np.where(np.isnan(weights), None, weights).tolist(), name="routing weights",
                      colorscale=WEIGHT_COLOURS, xaxis="x3", yaxis="y3", text=hover,
                      hovertemplate="%{text}<br>weight %{z:.3f}<extra></extra>", xgap=1, ygap=1,
                      colorbar={"title": {"text": "weight"}, "len": 0.2, "y": 0, "yanchor": "bottom"})


def _tick(piece: str) -> str:
    text = plain_label(repr(piece)[1:-1])
    return text if len(text) <= 12 else text[:11] + "…"

