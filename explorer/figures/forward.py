"""The forward-pass view: one decoder layer as a data-flow diagram, drawn from the steps' traces.

The residual stream is a horizontal spine (token ids -> embedding -> the layer -> final norm -> LM
head -> sampling -> the token); the attention branch leaves it above and the MLP branch below, each
rejoining it at a "+" (the residual add). The layer is drawn once, framed and marked "x L". Every stop
of the layer (and every stop outside the layers) is a node labelled with its measured output shape:
the prefill's in blue, the shown decode step's in orange, at one scale: an activation box is T rows
high, so the decode step's box is one row of the prefill's, while the weights (grey nodes) are the
same in every step. The KV cache is a strip of n positions that gains one per decode step (the new
one marked); the attention scores go from a T x n triangle to one row of n.

A long row wraps: the MLP sub-layer always starts a new row, and presenter mode wraps sooner (its
text is larger). Pure plotly over traces (no model call). The diagram is built in layers, one module
each: the geometry (`forward_layout`), the nodes (`forward_nodes`), the lines (`forward_edges`), the
frame and notes (`forward_notes`); the nodes' text is `forward_text`'s.
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.analysis.records import OpCost
from explorer.families import Family
from explorer.figures.forward_edges import edge_trace, spine_trace
from explorer.figures.forward_layout import (
    PRESENTER_ROW_CHARS,
    ROW_CHARS,
    SLOT_PX,
    layout_columns,
    place_nodes,
    row_width,
    wrap_rows,
)
from explorer.figures.forward_nodes import (
    box_traces,
    glyph_traces,
    hover_trace,
    kv_strip_trace,
    label_trace,
    plus_trace,
)
from explorer.figures.forward_notes import layer_frames, layer_notes
from explorer.figures.forward_text import Stages, stage_title
from explorer.figures.theme import base_layout, set_layout
from explorer.trace import StepTrace


def forward_figure(prefill: StepTrace, decode: StepTrace | None, layer: int, n_layers: int,
                   tied_lm_head: bool = False, costs: tuple[dict[str, OpCost], ...] = (),
                   presenter: bool = False, family: Family | None = None) -> go.Figure:
    """Decoder layer `layer` (and every stop outside the layers) as a data-flow diagram, the prefill's
    measured shapes beside the decode step's.

    Args:
        prefill: the prefill step's trace.
        decode: the decode step shown beside it; None while the prefill is shown.
        layer: the decoder layer whose measured values the nodes show (0-based).
        n_layers: L, the number of decoder layers (the frame's "x L").
        tied_lm_head: the LM head's weight is the embedding table (the config's `tie_word_embeddings`).
        costs: the analytic cost of each stop of `layer` and outside the layers, by canonical name
            (`explorer.analysis.measured.stop_costs`), for the prefill then the decode step; () where
            the cost model does not know the family.
        presenter: wrap into shorter rows, for presenter mode's larger text.
        family: the run's model family, for the hovers' formulas (LayerNorm; GPT-2's `Conv1D`, its
            weights stored [in, out]); None: the Llama block's.

    Returns:
        A figure with `layout.meta == {"view": "forward", "step": ...}`. Traces, by name: "residual
        stream" (the spine), "edges", "weights" (one filled box per weight; `meta` lists the weights'
        stops and the tied ones), "frames" (every stop's full box, white; `meta = {"stops": [...]}`),
        "prefill" and the decode step's label ("step k"): one filled box
        per stop, `meta = {"rows": T, "stops": [...]}` (a box's height is its rows of the prefill's
        T), "kv cache" (a strip per step, `meta = {"positions": [n, ...]}`), "scores: prefill" and
        "scores: decode", "gqa groups", "labels" (text; `customdata` the node keys), "residual adds",
        and "nodes" (invisible markers carrying the hover; `customdata`: the stops' canonical names,
        "W:" + stop for a weight, "kv_cache").

    Raises:
        ValueError: the prefill has no stop in layer `layer`.
    """
    ops = [op for op in prefill.ops if op.layer in (None, layer)]
    if not any(op.layer == layer for op in ops):
        raise ValueError(f"The prefill has no stops in layer {layer}.")
    stages = Stages(prefill, decode, {op.name: op for op in ops},
                    {op.name: op for op in decode.ops} if decode else {}, costs, family)
    columns = layout_columns(ops, stages, tied_lm_head)
    rows = wrap_rows(columns, PRESENTER_ROW_CHARS if presenter else ROW_CHARS)
    nodes, (bottom, top) = place_nodes(rows, stages)
    width = max(row_width(row) for row in rows)
    data = [spine_trace(rows, nodes), edge_trace(rows, nodes), *box_traces(nodes, stages, tied_lm_head),
            kv_strip_trace(nodes, stages, layer), *glyph_traces(nodes, stages),
            label_trace(nodes, stages, tied_lm_head), plus_trace(nodes), hover_trace(nodes, stages, tied_lm_head)]
    layout = {"xaxis": {"range": [-1, width + 1], "visible": False},
              "yaxis": {"range": [bottom - 0.2, top + 0.5], "visible": False},
              "shapes": layer_frames(rows, nodes), "showlegend": False, "hovermode": "closest",
              "annotations": layer_notes(nodes, stages, n_layers, width, top)}
    fig = go.Figure(data=data, layout=layout)
    title = (f"Layer {layer} of {n_layers} (all alike), each stop's measured output shape: {stage_title(prefill)}"
             + (f" beside {stage_title(decode)}" if decode else ""))
    base_layout(fig, "forward", decode.step_index if decode else 0, title,
                height=round((top - bottom + 0.7) * SLOT_PX) + 100)
    # a light hover label: the dimension symbols keep their colours (they are dark)
    return set_layout(fig, margin={"l": 10, "r": 10, "t": 50, "b": 50},
                      hoverlabel={"bgcolor": "#ffffff", "bordercolor": "#57606a",
                                  "font": {"family": "monospace", "size": 13, "color": "#24292f"}})
