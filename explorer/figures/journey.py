"""The journey view: the stops of one decoder layer (and those outside the layers), prefill beside a
decode step, with shapes, wall time, and on hover each stop's formula and weight shape.

Four columns share one row per stop, in execution order top to bottom: the prefill's input -> output
shapes, its wall time, then the same for the decode step. Rows are tinted by operator kind.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from explorer.figures.dims import coloured
from explorer.figures.stop_docs import STOP_DOCS, weight_shape
from explorer.figures.theme import base_layout, kind_colour, plain_label, set_layout, subplot_grid
from explorer.journey import ms_text, shape_text, step_label
from explorer.stops import parse_stop_name
from explorer.trace import OpRecord, StepTrace

ROW_PX = 17  # a row per stop: the 26 rows of a Llama layer and the stops around it fit 640 px
MIN_BAR_MS = 1e-3  # a stop faster than this (or a view, None) draws as a stub
MAX_FLOW_CHARS = 68  # what a shape column holds at 1400 px; the hover has the full text


def journey_figure(prefill: StepTrace, decode: StepTrace | None, layer: int) -> go.Figure:
    """The stops of decoder layer `layer` and every stop outside the layers, prefill beside decode.

    Rows are the prefill's stops in execution order (top to bottom); each column pair shows input ->
    output shapes and wall time (ms). Hovering a row gives the stop's formula, shapes in symbols and
    numbers, weight shape ([out_features, in_features] for a GEMM, [d] for a norm, [V, d] for the
    embedding) and wall time. Stop names, kinds and dtypes are escaped (`plain_label`): in a saved
    run they are the file's text.

    Args:
        prefill: the prefill step's trace.
        decode: the decode step shown beside it, or None before the first decode step.
        layer: the decoder layer whose stops are shown (0-based).

    Returns:
        A figure with `layout.meta == {"view": "journey", "step": ...}`. Per step column pair: a bar
        trace in the shape column (x = 1 per row, tinted per row by operator kind, the hover text), a
        bar trace in the wall-time column (x: wall time in ms, per-row colour and "ms" text; a stop
        absent from the step has no bar) and a text trace with the shapes; then one legend-only bar
        trace per operator kind, named by the kind.

    Raises:
        ValueError: the prefill has no stop in layer `layer`.
    """
    rows = [op for op in prefill.ops if op.layer in (None, layer)]
    if not any(op.layer == layer for op in rows):
        raise ValueError(f"The prefill has no stops in layer {layer}.")
    vocab = _vocab(prefill)
    layout, cells = subplot_grid(
        [_column_title(prefill), "wall time", _column_title(decode) if decode else "decode", "wall time" if decode else ""],
        rows=1, cols=4, shared_yaxes=True, horizontal_spacing=0.012, column_widths=[0.36, 0.14, 0.36, 0.14])
    data = _column(rows, vocab, cells[1, 1], cells[1, 2])
    if decode is None:
        layout["annotations"].append({"text": "run a decode step", "showarrow": False, "y": 0.5, "xref": "paper",
                                      "x": sum(layout["xaxis3"]["domain"]) / 2, "yref": "paper",
                                      "font": {"size": 15, "color": "#777777"}})
    else:
        decode_ops = {op.name: op for op in decode.ops}
        data += _column([decode_ops.get(op.name) or _absent(op.name) for op in rows], vocab, cells[1, 3], cells[1, 4])
    data += _legend(rows)
    _style_axes(layout, rows, [prefill, decode] if decode else [prefill])
    layout.update(bargap=0.15, hovermode="closest",
                  legend={"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0,
                          "title": {"text": "operator kind"},
                          "itemclick": False, "itemdoubleclick": False})  # a key: its entries hide nothing
    fig = go.Figure(data=data, layout=layout)
    base_layout(fig, "journey", decode.step_index if decode else 0,
                f"Journey through layer {layer}: shapes and wall time at every stop", height=ROW_PX * len(rows) + 190)
    return set_layout(fig, margin={"l": 150, "r": 20, "t": 90, "b": 120})


def _column(ops: list[OpRecord], vocab: int, shapes_cell: dict, wall_cell: dict) -> list[dict]:
    """One step's traces: a full-width bar per row tinted by kind (the row's hover) and the shape text
    in the shapes column; a wall-time bar per stop that ran in the wall-time column."""
    ran = [op for op in ops if op.kind]
    y = [plain_label(op.name) for op in ran]
    colours = [kind_colour(op.kind) for op in ran]
    common = {"type": "bar", "y": y, "orientation": "h", "hovertext": [_hover(op, vocab) for op in ran],
              "hovertemplate": "%{hovertext}<extra></extra>", "showlegend": False}
    walls = np.array([max(op.wall_ms or 0.0, MIN_BAR_MS) for op in ran])  # float64: a few values, exact
    return [
        {**common, **shapes_cell, "name": "stop", "x": np.ones(len(ran), np.float32), "opacity": 0.28,
         "marker": {"color": colours}},
        {**common, **wall_cell, "name": "wall time", "x": walls, "marker": {"color": colours},
         "text": [ms_text(op) for op in ran], "textposition": "outside", "cliponaxis": False},
        {"type": "scatter", **shapes_cell, "x": np.full(len(ops), 0.015, np.float32),
         "y": [plain_label(op.name) for op in ops],
         "mode": "text", "text": [_fit(_flow(op)) for op in ops], "textposition": "middle right", "cliponaxis": True,
         "textfont": {"family": "monospace", "size": 11}, "hoverinfo": "skip", "showlegend": False},
    ]


def _legend(ops: list[OpRecord]) -> list[dict]:
    """One legend entry per operator kind, in order of first appearance: a bar at no position (a
    trace without data gets no legend entry; one at a real row would shrink that row's bars). One
    legend group per kind lays the entries out at their own widths rather than on a wide grid."""
    kinds = dict.fromkeys(op.kind for op in ops if op.kind)
    return [{"type": "bar", "x": [None], "y": [None], "orientation": "h", "name": plain_label(kind),
             "legendgroup": kind, "showlegend": True, "marker": {"color": kind_colour(kind)}} for kind in kinds]


def _style_axes(layout: dict, rows: list[OpRecord], traces: list[StepTrace]) -> None:
    """Rows in execution order top to bottom, labelled without the `layers.i.` prefix (the title says
    which layer); log wall-time axes with room for the bar labels."""
    names = [plain_label(op.name) for op in rows]
    rows_axis = {"categoryorder": "array", "categoryarray": names, "tickvals": names,
                 "ticktext": [plain_label(_relative(op)) for op in rows], "autorange": "reversed", "showgrid": False,
                 "tickfont": {"family": "monospace", "size": 11}}
    for col in (1, 2, 3, 4):
        layout[f"yaxis{col if col > 1 else ''}"].update(rows_axis)
    for col in (1, 3):
        layout[f"xaxis{col if col > 1 else ''}"].update(range=[0, 1], visible=False)
    for col, trace in zip((2, 4), traces, strict=False):
        longest = max((op.wall_ms or 0.0 for op in trace.ops), default=0.0)
        top = math.log10(max(longest, MIN_BAR_MS)) + 2.5  # room for the "12.34" label past the longest bar
        decades = list(range(round(math.log10(MIN_BAR_MS)), math.floor(top) + 1, 3))
        layout[f"xaxis{col}"].update(type="log", range=[math.log10(MIN_BAR_MS), top],
                                     title={"text": "ms (log scale)"}, tickvals=[10.0**k for k in decades],
                                     ticktext=[f"{10.0**k:g}" for k in decades], tickangle=0)


def _column_title(trace: StepTrace) -> str:
    return f"{step_label(trace)}: in → out (T={len(trace.input_ids)}, n={trace.context_length})"


def _absent(name: str) -> OpRecord:
    """A placeholder row for a stop the decode step lacks (tokenize: its input is already an id)."""
    return OpRecord(name, "", None, [], [], "", None)


def _flow(op: OpRecord) -> str:
    """`[1, 35, 576] → [1, 35, 192]`, runs of equal shapes written once with ×k (K and V)."""
    if not op.kind:
        return "(not in this step)"
    return f"{_shapes(op.input_shapes) or 'text'} → {_shapes(op.output_shapes) or 'text'}"


def _fit(text: str) -> str:
    return text if len(text) <= MAX_FLOW_CHARS else text[: MAX_FLOW_CHARS - 1] + "…"


def _shapes(shapes: list[list[int]]) -> str:
    parts: list[list] = []
    for shape in shapes:
        if parts and parts[-1][0] == shape:
            parts[-1][1] += 1
        else:
            parts.append([shape, 1])
    return " ".join(shape_text(shape) + (f"×{count}" if count > 1 else "") for shape, count in parts)


def _relative(op: OpRecord) -> str:
    """`attn.q_proj` for `layers.4.attn.q_proj`; a stop outside the layers keeps its name."""
    return parse_stop_name(op.name)[1]


def _vocab(trace: StepTrace) -> int:
    return trace.op("lm_head").output_shapes[0][-1]


def _hover(op: OpRecord, vocab: int) -> str:
    formula, symbols, weight_symbols = STOP_DOCS.get(_relative(op), ("", "", None))
    lines = [f"<b>{plain_label(op.name)}</b> ({plain_label(op.kind)})", formula, f"shapes: {coloured(symbols)}",
             f"        {_flow(op)}"]
    weight = weight_shape(op, vocab)
    if weight_symbols and weight:
        lines.append(f"weight: {coloured(weight_symbols)} = {shape_text(weight)}")
    unit = " ms" if op.wall_ms is not None else " (no kernel)"
    lines.append(f"dtype: {plain_label(op.dtype)} · wall: {ms_text(op)}{unit}")
    return "<br>".join(lines)
