"""The journey view: the stops of one decoder layer (and those outside the layers), prefill beside a
decode step, with shapes, wall time, and on hover each stop's formula and weight shape.

Four columns share one row per stop, in execution order top to bottom: the prefill's input -> output
shapes, its wall time, then the same for the decode step. Rows are tinted by operator kind.

Wall times are measured (`OpRecord.wall_ms`, ms) and shown for what they are worth
(`explorer.analysis.timing_stats`): a layer stop's bar is its median over the step's layers (each
runs it once per step, on the same shapes), its whisker their p10-p90 and a diamond the shown
layer's own time; a stop outside the layers is one measurement (a hatched bar); a time below the
noise floor (the timer's resolution and the hooks' overhead) is a grey bar marked "noise". A
shape-only step (meta device: nothing computed) draws no wall time at all.
"""

from __future__ import annotations

import math
from itertools import groupby

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.timing_stats import NOISE_FLOOR_MS, StopTiming, ms_number, stop_timing, timing_description
from explorer.families import Family
from explorer.figures.dims import coloured
from explorer.figures.stop_docs import stop_doc, weight_shape
from explorer.figures.theme import base_layout, kind_colour, plain_label, set_layout, subplot_grid
from explorer.journey import shape_text, step_label
from explorer.stop_names import parse_stop_name
from explorer.trace import OpRecord, StepTrace

ROW_PX = 16  # a row per stop: the 26 rows of a Llama layer, the stops around it and the key fit 660 px
MIN_BAR_MS = 1e-3  # a stop faster than this (or a view, None) draws as a stub
# The shapes column at a 1280x720 screen: 375 px measured in Chromium (the column's 0.38 of the plot);
# each row's text is set in the size at which the longest row fits it whole (monospace: 0.6 em a character)
SHAPES_COLUMN_PX = 375
FLOW_FONT_PX = (8, 11)  # the smallest and the largest size of the shapes' text
NOISE_COLOUR = "#d4d4d4"  # a time below the noise floor: greyed, whatever its kind
LAYER_MARK_COLOUR = "#222222"
SINGLE_PATTERN = "/"  # the hatch of a bar that is one measurement (a stop outside the layers)
LABEL_DECADES = 1.7  # room right of the longest whisker for the right-aligned "12.34" labels
SHAPE_ONLY_NOTE = "shape-only:<br>no compute,<br>no times"
KEY_SHIFT_PX = 52  # the key sits under the wall axes' tick labels and titles


def journey_figure(prefill: StepTrace, decode: StepTrace | None, layer: int,
                   family: Family | None = None) -> go.Figure:
    """The stops of decoder layer `layer` and every stop outside the layers, prefill beside decode.

    Rows are the prefill's stops in execution order (top to bottom); each column pair shows input ->
    output shapes and wall time (ms, measured; see the module docstring for what a bar, a whisker, a
    diamond, a hatch and a grey bar mean). Hovering a row gives the stop's formula, shapes in symbols
    and numbers, weight shape as stored ([out_features, in_features] for a GEMM, [in_features,
    out_features] for GPT-2's `Conv1D` layers, [d] for a norm, [V, d] for the embedding) and wall
    time with its spread. Stop names, kinds and dtypes are escaped (`plain_label`): in a saved run
    they are the file's text.

    Args:
        prefill: the prefill step's trace.
        decode: the decode step shown beside it, or None before the first decode step.
        layer: the decoder layer whose stops are shown (0-based).
        family: the run's model family, for the hover's formulas (LayerNorm, GPT-2's `Conv1D`); None:
            the Llama block's.

    Returns:
        A figure with `layout.meta == {"view": "journey", "step": ...}`. Per step column pair: a bar
        trace in the shape column (x = 1 per row, tinted per row by operator kind, the hover text);
        unless the step is shape-only, in the wall-time column a bar trace named "wall time" (x: the
        median over the layers in ms, or the one measurement outside them; per-row colour, grey below
        `NOISE_FLOOR_MS`; hatched where one measurement; error_x: p10-p90 of the layers), a scatter
        named "layer k" (the shown layer's own times, ms) and a text scatter named "wall ms" (the
        labels); a stop absent from the step has none. A shape-only step has an annotation
        "shape-only: no compute, no times" there instead. Then a text trace with the shapes; then
        one legend-only bar trace per operator kind, named by the kind.

    Raises:
        ValueError: the prefill has no stop in layer `layer`.
    """
    rows = [op for op in prefill.ops if op.layer in (None, layer)]
    if not any(op.layer == layer for op in rows):
        raise ValueError(f"The prefill has no stops in layer {layer}.")
    steps = [prefill, decode] if decode else [prefill]
    layout, cells = _grid(prefill, decode)
    data = _step_columns(rows, prefill, decode, layer, cells, family)
    layout["annotations"] += _column_notes(layout, steps)
    data += _legend(rows)
    _style_axes(layout, rows, steps, layer)
    if not prefill.shape_only:
        layout["annotations"].append(_key(prefill, layer))
    layout.update(bargap=0.15, hovermode="closest",
                  legend={"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom", "x": 0,
                          "title": {"text": "operator kind"},
                          "itemclick": False, "itemdoubleclick": False})  # a key: its entries hide nothing
    fig = go.Figure(data=data, layout=layout)
    what = "shapes at every stop (shape-only: no times)" if prefill.shape_only else \
        "shapes and wall time at every stop"
    base_layout(fig, "journey", decode.step_index if decode else 0, f"Journey through layer {layer}: {what}",
                height=ROW_PX * len(rows) + (176 if prefill.shape_only else 206))
    return set_layout(fig, margin={"l": 150, "r": 20, "t": 76, "b": 120 if prefill.shape_only else 150})


def _grid(prefill: StepTrace, decode: StepTrace | None) -> tuple[dict, dict[tuple[int, int], dict[str, str]]]:
    """The four columns (`subplot_grid`'s layout and cells), titled: the prefill's shapes and wall
    times, then the decode step's (or an empty pair before the first decode step)."""
    return subplot_grid(
        [_column_title(prefill), _wall_title(prefill), _column_title(decode) if decode else "decode",
         _wall_title(decode) if decode else ""],
        rows=1, cols=4, shared_yaxes=True, horizontal_spacing=0.012, column_widths=[0.38, 0.12, 0.38, 0.12])


def _step_columns(rows: list[OpRecord], prefill: StepTrace, decode: StepTrace | None, layer: int,
                  cells: dict[tuple[int, int], dict[str, str]], family: Family | None) -> list[dict]:
    """The prefill's traces in columns 1-2, then the decode step's (if any) in columns 3-4, on the
    prefill's rows: a stop the decode step lacks is a placeholder row (`_absent`)."""
    vocab = _vocab(prefill)
    data = _column(rows, vocab, prefill, layer, cells[1, 1], cells[1, 2], family)
    if decode is not None:
        decode_ops = {op.name: op for op in decode.ops}
        data += _column([decode_ops.get(op.name) or _absent(op.name) for op in rows], vocab, decode, layer,
                        cells[1, 3], cells[1, 4], family)
    return data


def _column_notes(layout: dict, steps: list[StepTrace]) -> list[dict]:
    """Grey notes over empty columns: the decode pair before the first decode step; the wall-time
    column of a shape-only step (nothing ran, so nothing was timed)."""
    notes = [] if len(steps) > 1 else [_note("run a decode step", layout["xaxis3"]["domain"])]
    return notes + [_note(SHAPE_ONLY_NOTE, layout[f"xaxis{col}"]["domain"])
                    for col, trace in zip((2, 4), steps, strict=False) if trace.shape_only]


def _column(ops: list[OpRecord], vocab: int, trace: StepTrace, layer: int, shapes_cell: dict,
            wall_cell: dict, family: Family | None) -> list[dict]:
    """One step's traces: a full-width bar per row tinted by kind (the row's hover) and the shape text
    in the shapes column; unless the step is shape-only, the wall times in the wall-time column
    (`_wall_traces`)."""
    ran = [op for op in ops if op.kind]
    y = [plain_label(op.name) for op in ran]
    hover = [_hover(op, vocab, trace, layer, family) for op in ran]
    common = {"type": "bar", "y": y, "orientation": "h", "hovertext": hover,
              "hovertemplate": "%{hovertext}<extra></extra>", "showlegend": False}
    data = [{**common, **shapes_cell, "name": "stop", "x": np.ones(len(ran), np.float32), "opacity": 0.28,
             "marker": {"color": [kind_colour(op.kind) for op in ran]}}]
    if not trace.shape_only:
        data += _wall_traces(ran, trace, layer, common, wall_cell)
    flows = [_flow(op, compact=True) for op in ops]
    data.append({"type": "scatter", **shapes_cell, "x": np.full(len(ops), 0.015, np.float32),
                 "y": [plain_label(op.name) for op in ops],
                 "mode": "text", "text": flows, "textposition": "middle right",
                 "cliponaxis": True, "textfont": {"family": "monospace", "size": flow_font_px(flows)},
                 "hoverinfo": "skip",
                 "showlegend": False})
    return data


def _wall_traces(ran: list[OpRecord], trace: StepTrace, layer: int, common: dict, wall_cell: dict) -> list[dict]:
    """The wall-time column of a timed step: bars at each stop's median (ms), p10-p90 whiskers (an
    invisible marker's error bars, on the layer stops only), the shown layer's own times as diamonds,
    and the labels right-aligned at the column's edge."""
    timings = [stop_timing(trace, op) for op in ran]
    bars = [max(t.median_ms, MIN_BAR_MS) if t else MIN_BAR_MS for t in timings]
    repeats = [(op, t, x) for op, t, x in zip(ran, timings, bars, strict=True) if t is not None and t.repeated]
    own = [(op, max(op.wall_ms, MIN_BAR_MS)) for op, _, _ in repeats if op.wall_ms is not None]
    colours = [NOISE_COLOUR if t and t.noise else kind_colour(op.kind) for op, t in zip(ran, timings, strict=True)]
    hatches = ["" if t is None or t.repeated else SINGLE_PATTERN for t in timings]
    marker = {"color": colours, "pattern": {"shape": hatches, "fgcolor": "#ffffff", "size": 5, "solidity": 0.3}}
    top = 10.0 ** _wall_top(trace, ran)
    return [
        {**common, **wall_cell, "name": "wall time", "x": np.array(bars), "marker": marker},
        {"type": "scatter", **wall_cell, "name": "p10-p90", "mode": "markers", "x": [x for _, _, x in repeats],
         "y": [plain_label(op.name) for op, _, _ in repeats], "marker": {"size": 1, "opacity": 0},
         "error_x": {"type": "data", "symmetric": False, "color": "#000000", "thickness": 1.5, "width": 3,
                     "array": [max(t.p90_ms - x, 0.0) for _, t, x in repeats],  # from the bar's end
                     "arrayminus": [max(x - max(t.p10_ms, MIN_BAR_MS), 0.0) for _, t, x in repeats]},
         "hoverinfo": "skip", "showlegend": False},
        {"type": "scatter", **wall_cell, "name": f"layer {layer}", "mode": "markers", "x": [x for _, x in own],
         "y": [plain_label(op.name) for op, _ in own], "showlegend": False,
         "marker": {"symbol": "diamond", "size": 7, "color": LAYER_MARK_COLOUR,
                    "line": {"color": "#ffffff", "width": 1}},
         "hovertext": [f"layer {layer} itself: {ms_number(op.wall_ms)} ms (measured)" for op, _ in own],
         "hovertemplate": "%{hovertext}<extra></extra>"},
        {"type": "scatter", **wall_cell, "name": "wall ms", "mode": "text", "x": np.full(len(ran), top),
         "y": common["y"], "text": [_label(t) for t in timings], "textposition": "middle left",
         "cliponaxis": False, "textfont": {"size": 11}, "hoverinfo": "skip",
         "showlegend": False},
    ]


def _label(timing: StopTiming | None) -> str:
    """A wall bar's label: the median (or the one measurement) in ms, "noise" below the floor, "view"."""
    if timing is None:
        return "view"
    return "noise" if timing.noise else ms_number(timing.median_ms)


def _note(text: str, domain: list[float]) -> dict:
    """A grey note in the middle of a column (x: its paper domain)."""
    return {"text": text, "showarrow": False, "y": 0.5, "xref": "paper", "x": sum(domain) / 2, "yref": "paper",
            "font": {"size": 15, "color": "#777777"}}


def _key(prefill: StepTrace, layer: int) -> dict:
    """What the wall-time columns draw, two lines under the wall-time axes' titles."""
    layers = len(prefill.kv)
    return {"text": f"wall time, measured: bar = median over the {layers} layers (each runs the stop once per step, "
                    f"on the same shapes), whisker = their p10–p90, ◆ = layer {layer} itself;<br>hatched = one "
                    f"measurement (a stop outside the layers); grey \"noise\" = below {NOISE_FLOOR_MS:g} ms, "
                    "within the timer's resolution and the hooks' own overhead",
            "showarrow": False, "xref": "paper", "yref": "paper", "x": 0, "y": 0, "xanchor": "left",
            "yanchor": "top", "yshift": -KEY_SHIFT_PX, "align": "left", "font": {"size": 11, "color": "#555555"}}


def _legend(ops: list[OpRecord]) -> list[dict]:
    """One legend entry per operator kind, in order of first appearance: a bar at no position (a
    trace without data gets no legend entry; one at a real row would shrink that row's bars). One
    legend group per kind lays the entries out at their own widths rather than on a wide grid."""
    kinds = dict.fromkeys(op.kind for op in ops if op.kind)
    return [{"type": "bar", "x": [None], "y": [None], "orientation": "h", "name": plain_label(kind),
             "legendgroup": kind, "showlegend": True, "marker": {"color": kind_colour(kind)}} for kind in kinds]


def _style_axes(layout: dict, rows: list[OpRecord], traces: list[StepTrace], layer: int) -> None:
    """Rows in execution order top to bottom, labelled without the `layers.i.` prefix (the title says
    which layer); log wall-time axes with room for the labels (hidden for a shape-only step)."""
    names = [plain_label(op.name) for op in rows]
    rows_axis = {"categoryorder": "array", "categoryarray": names, "tickvals": names,
                 "ticktext": [plain_label(_relative(op)) for op in rows], "autorange": "reversed", "showgrid": False,
                 "tickfont": {"family": "monospace", "size": 11}}
    for col in (1, 2, 3, 4):
        layout[f"yaxis{col if col > 1 else ''}"].update(rows_axis)
    for col in (1, 3):
        layout[f"xaxis{col if col > 1 else ''}"].update(range=[0, 1], visible=False)
    for col, trace in zip((2, 4), traces, strict=False):
        if trace.shape_only:
            layout[f"xaxis{col}"].update(visible=False)
            continue
        top = _wall_top(trace, [op for op in trace.ops if op.layer in (None, layer)])
        decades = list(range(round(math.log10(MIN_BAR_MS)), math.floor(top) + 1, 3))
        layout[f"xaxis{col}"].update(type="log", range=[math.log10(MIN_BAR_MS), top],
                                     title={"text": "ms (log scale)"}, tickvals=[10.0**k for k in decades],
                                     ticktext=[f"{10.0**k:g}" for k in decades], tickangle=0)


def _wall_top(trace: StepTrace, ops: list[OpRecord]) -> float:
    """log10 of the wall axis's right end: past the longest whisker or diamond of the stops drawn,
    with room for the labels."""
    longest = MIN_BAR_MS
    for op in ops:
        timing = stop_timing(trace, op)
        if timing is not None:
            longest = max(longest, timing.p90_ms if timing.repeated else timing.median_ms, op.wall_ms or 0.0)
    return math.log10(longest) + LABEL_DECADES


def _wall_title(trace: StepTrace) -> str:
    if trace.shape_only:
        return "no wall time"
    return f"wall time<br>median of {len(trace.kv)} layers"


def _column_title(trace: StepTrace) -> str:
    return f"{step_label(trace)}: in → out (T={len(trace.input_ids)}, n={trace.context_length})"


def _absent(name: str) -> OpRecord:
    """A placeholder row for a stop the decode step lacks (tokenize: its input is already an id)."""
    return OpRecord(name, "", None, [], [], "", None)


def _flow(op: OpRecord, compact: bool = False) -> str:
    """`[1, 35, 576] → [1, 35, 192]` (compact, the shapes column's: `[1,35,576] → [1,35,192]`, the
    forward diagram's notation), runs of equal shapes written once with ×k (K and V)."""
    if not op.kind:
        return "(not in this step)"
    return f"{_shapes(op.input_shapes, compact) or 'text'} → {_shapes(op.output_shapes, compact) or 'text'}"


def flow_font_px(flows: list[str]) -> int:
    """The size in px at which the longest of `flows` fits the shapes column whole (`SHAPES_COLUMN_PX`),
    within `FLOW_FONT_PX`."""
    longest = max(map(len, flows), default=1)
    return max(FLOW_FONT_PX[0], min(FLOW_FONT_PX[1], int(SHAPES_COLUMN_PX / (0.6 * longest))))


def _shapes(shapes: list[list[int]], compact: bool) -> str:
    runs = [(shape, sum(1 for _ in run)) for shape, run in groupby(shapes)]
    return " ".join((f"[{','.join(map(str, shape))}]" if compact else shape_text(shape))
                    + (f"×{count}" if count > 1 else "") for shape, count in runs)


def _relative(op: OpRecord) -> str:
    """`attn.q_proj` for `layers.4.attn.q_proj`; a stop outside the layers keeps its name."""
    return parse_stop_name(op.name)[1]


def _vocab(trace: StepTrace) -> int:
    return trace.op("lm_head").output_shapes[0][-1]


def _hover(op: OpRecord, vocab: int, trace: StepTrace, layer: int, family: Family | None) -> str:
    formula, symbols, weight_symbols = stop_doc(_relative(op), family)
    lines = [f"<b>{plain_label(op.name)}</b> ({plain_label(op.kind)})", formula, f"shapes: {coloured(symbols)}",
             f"        {_flow(op)}"]
    weight = weight_shape(op, vocab, family is not None and family.conv1d)
    if weight_symbols and weight:
        lines.append(f"weight: {coloured(weight_symbols)} = {shape_text(weight)}")
    lines.append(f"dtype: {plain_label(op.dtype)}")
    lines.append(_wall_line(op, trace, layer))
    return "<br>".join(lines)


def _wall_line(op: OpRecord, trace: StepTrace, layer: int) -> str:
    if trace.shape_only:
        return "wall: not timed (shape-only: no compute ran)"
    timing: StopTiming | None = stop_timing(trace, op)
    return f"wall (measured): {timing_description(timing, op.wall_ms, layer if op.layer is not None else None)}"
