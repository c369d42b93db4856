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
text is larger). Pure plotly over traces (no model call).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import plotly.graph_objects as go

from explorer.analysis.records import OpCost
from explorer.families import Family
from explorer.figures.dims import DIM_COLOURS
from explorer.figures.forward_text import (
    DECODE_TEXT,
    PREFILL_TEXT,
    Stages,
    dimension_values,
    escaped,
    node_hover,
    node_label,
    stage_title,
)
from explorer.figures.theme import DECODE_COLOUR, PREFILL_COLOUR, base_layout, set_layout
from explorer.journey import step_label
from explorer.stop_names import parse_stop_name
from explorer.trace import OpRecord, StepTrace

# x is measured in characters of the labels' monospace font (10 px: about 6.1 px a character), so a
# row of ROW_CHARS fills a figure about 1,240 px wide (a 1280x720 screen) and every label fits its box.
ROW_CHARS = 200
PRESENTER_ROW_CHARS = 132  # presenter mode's text is 1.5x larger: fewer characters per row
SLOT_PX = 50  # one vertical slot (a node and its gap), in pixels
BOX_H = 0.86  # a node's height, in slots
MIN_BOX_CHARS = 8  # the narrowest node
GAP_CHARS = 1.5  # between two nodes side by side
MIN_ROW_FRACTION = 0.07  # the thinnest box drawn, as a fraction of a full one (1 row of a long prompt)
PLUS_CHARS = 5
KV_CHARS = 26  # the KV-cache strip's width, ending over the cache write's right edge
MAX_KV_TICKS = 96  # position ticks on the KV strip up to this many positions
# Stops computed side by side, stacked in one column, at these slots (1 = next to the spine).
PARALLEL_SLOTS = {"attn.q_proj": 3, "attn.k_proj": 2, "attn.v_proj": 1, "attn.q_norm": 3, "attn.k_norm": 2,
                  "mlp.gate_proj": 1, "mlp.up_proj": 2}
PARALLEL_GROUPS = {"attn.q_proj": "qkv", "attn.k_proj": "qkv", "attn.v_proj": "qkv", "attn.q_norm": "qk_norm",
                   "attn.k_norm": "qk_norm", "mlp.gate_proj": "gate_up", "mlp.up_proj": "gate_up"}
RESIDUALS = ("attn_residual", "mlp_residual")
WEIGHT_FILL = "#ececec"
PREFILL_FILL = "#d6e6f5"
EDGE_COLOUR, SPINE_COLOUR, FRAME_COLOUR = "#9a9a9a", "#c9c9c9", "#6e7781"


@dataclass(frozen=True)
class Column:
    """Stops drawn one above the other at one x: one stop, or stops computed side by side (q, k, v).

    Attributes:
        stops: the stops' canonical names.
        branch: "spine" (on the residual stream), "attn" (above it) or "mlp" (below it).
        width: in characters (`ROW_CHARS`).
        box: each stop's box width, in characters.
        weight_box: the width of the stacked stops' weight boxes (drawn left of them); 0 otherwise.
    """

    stops: tuple[str, ...]
    branch: str
    width: float
    box: float
    weight_box: float = 0.0


@dataclass(frozen=True)
class Node:
    """A drawn node: a stop, a weight ("W:" + stop) or the KV cache ("kv_cache"), at (x, y) centre,
    `w` characters wide, in row `row`."""

    key: str
    x: float
    y: float
    row: int
    w: float


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
        stops and the tied ones), "prefill" and the decode step's label ("step k"): one filled box
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
    nodes, (bottom, top) = _place(rows, stages)
    width = max(_row_width(row) for row in rows)
    data = [_spine(rows, nodes), _edges(rows, nodes), *_boxes(nodes, stages, tied_lm_head),
            _kv_strips(nodes, stages, layer), *_glyphs(nodes, stages), _labels(nodes, stages, tied_lm_head),
            _plus_markers(nodes), _hover_trace(nodes, stages, tied_lm_head)]
    layout = {"xaxis": {"range": [-1, width + 1], "visible": False},
              "yaxis": {"range": [bottom - 0.2, top + 0.5], "visible": False},
              "shapes": _frames(rows, nodes), "showlegend": False, "hovermode": "closest",
              "annotations": _notes(nodes, stages, n_layers, width, top)}
    fig = go.Figure(data=data, layout=layout)
    title = (f"Layer {layer} of {n_layers} (all alike), each stop's measured output shape: {stage_title(prefill)}"
             + (f" beside {stage_title(decode)}" if decode else ""))
    base_layout(fig, "forward", decode.step_index if decode else 0, title,
                height=round((top - bottom + 0.7) * SLOT_PX) + 100)
    # a light hover label: the dimension symbols keep their colours (they are dark)
    return set_layout(fig, margin={"l": 10, "r": 10, "t": 50, "b": 50},
                      hoverlabel={"bgcolor": "#ffffff", "bordercolor": "#57606a",
                                  "font": {"family": "monospace", "size": 13, "color": "#24292f"}})


def layout_columns(ops: list[OpRecord], stages: Stages, tied: bool) -> list[Column]:
    """The stops in execution order as columns along the spine: stops outside the layers and the
    residual adds on the spine, the attention sub-layer above it, the MLP sub-layer below it; stops
    computed side by side (q, k, v; their QK-norms; gate and up) stacked in one column, their weights
    left of them. Each column as wide as its longest label."""
    groups: list[list[str]] = []
    branches: list[str] = []
    branch_of_layer = "attn"
    grouped: dict[str, int] = {}
    for op in ops:
        relative = parse_stop_name(op.name)[1]
        if op.layer is None or relative in RESIDUALS:
            branch = "spine"
            if relative == "attn_residual":
                branch_of_layer = "mlp"
        else:
            branch = branch_of_layer
        group = PARALLEL_GROUPS.get(relative)
        if group is not None and group in grouped:
            groups[grouped[group]].append(op.name)
            continue
        if group is not None:
            grouped[group] = len(groups)
        groups.append([op.name])
        branches.append(branch)
    return [_column(tuple(stops), branch, stages, tied) for stops, branch in zip(groups, branches, strict=True)]


def _column(stops: tuple[str, ...], branch: str, stages: Stages, tied: bool) -> Column:
    if _is_plus(stops[0]):
        return Column(stops, branch, PLUS_CHARS, PLUS_CHARS)
    box = max(MIN_BOX_CHARS, *(_label_chars(stop, stages, tied) for stop in stops)) + 0.5
    if len(stops) == 1:
        return Column(stops, branch, box + GAP_CHARS, box)
    weights = [stop for stop in stops if _has_weight(stages.prefill_ops[stop])]
    weight_box = max((_label_chars("W:" + stop, stages, tied) for stop in weights), default=0) + 1 if weights else 0
    return Column(stops, branch, box + (weight_box + GAP_CHARS if weights else 0) + GAP_CHARS, box, weight_box)


def _label_chars(key: str, stages: Stages, tied: bool) -> int:
    """The longest line of a node's label, in characters (the label without its markup)."""
    text = node_label(key, stages, tied)
    return max(len(re.sub(r"<[^>]+>", "", line)) for line in text.split("<br>"))


def _row_width(row: list[Column]) -> float:
    return sum(column.width for column in row)


def wrap_rows(columns: list[Column], row_chars: float) -> list[list[Column]]:
    """The columns cut into rows of at most `row_chars` characters; the MLP sub-layer starts a row."""
    rows: list[list[Column]] = [[]]
    for column, previous in zip(columns, [None, *columns[:-1]], strict=True):
        mlp_starts = column.branch == "mlp" and previous is not None and previous.branch == "spine"
        if rows[-1] and (_row_width(rows[-1]) + column.width > row_chars or mlp_starts):
            rows.append([])
        rows[-1].append(column)
    return rows


def _slots(column: Column) -> list[tuple[str, float]]:
    """(stop, slot) of each stop in `column`: 0 on the spine, > 0 above it, < 0 below it."""
    if column.branch == "spine":
        return [(column.stops[0], 0.0)]
    sign = 1.0 if column.branch == "attn" else -1.0
    return [(stop, sign * PARALLEL_SLOTS.get(parse_stop_name(stop)[1], 1)) for stop in column.stops]


def _place(rows: list[list[Column]], stages: Stages) -> tuple[dict[str, Node], tuple[float, float]]:
    """Every node's centre; rows stacked top to bottom, each as tall as what it holds. A single stop's
    weight sits beyond it (away from the spine), a stacked stop's on its left. Returns the nodes by
    key and the diagram's (bottom, top) in slots."""
    nodes: dict[str, Node] = {}
    spine_y, top = 0.0, None
    for index, row in enumerate(rows):
        placed: list[Node] = []
        x = 0.0
        for column in row:
            centre = x + column.width - GAP_CHARS / 2 - column.box / 2
            for stop, slot in _slots(column):
                placed.append(Node(stop, centre, slot, index, column.box))
                if _has_weight(stages.prefill_ops[stop]):
                    if column.weight_box:
                        weight_x = centre - column.box / 2 - GAP_CHARS - column.weight_box / 2
                        placed.append(Node("W:" + stop, weight_x, slot, index, column.weight_box))
                    else:
                        placed.append(Node("W:" + stop, centre, slot + (1 if slot >= 0 else -1), index, column.box))
            if column.stops[0].endswith("attn.kv_cache_write"):
                # over the stops before it (they have no weights), but never past the row's start
                placed.append(Node("kv_cache", max(centre + column.box / 2 - KV_CHARS / 2, KV_CHARS / 2),
                                   2.2, index, KV_CHARS))
            x += column.width
        above = max(node.y for node in placed) + 0.6
        below = min(node.y for node in placed) - 0.6
        if top is None:
            top = above
        else:
            spine_y -= above
        nodes |= {node.key: Node(node.key, node.x, spine_y + node.y, index, node.w) for node in placed}
        spine_y += below
    return nodes, (spine_y, top)


def _has_weight(op: OpRecord) -> bool:
    return op.kind in ("gemm", "norm") or op.name == "embed"


def _rows_of(op: OpRecord | None, trace: StepTrace) -> int:
    """The token rows a stop's output holds: T, except the LM head (logits for the last position only,
    its output's second axis) and the stops after it (one id, one piece)."""
    if op is None:
        return 0
    if op.name == "lm_head":
        return op.output_shapes[0][-2]
    if op.name in ("sample", "detokenize"):
        return 1
    return len(trace.input_ids)


def _box(node: Node, height: float, bottom: float | None = None) -> tuple[list, list]:
    """A closed rectangle's outline (x, y) around `node`, `height` slots tall from `bottom` (default:
    the full box's bottom), then a None gap for the next one."""
    low = node.y - BOX_H / 2 if bottom is None else bottom
    left, right = node.x - node.w / 2, node.x + node.w / 2
    return [left, right, right, left, left, None], [low, low, low + height, low + height, low, None]


def _boxes(nodes: dict[str, Node], stages: Stages, tied: bool) -> list[dict]:
    """The weights (grey, one size for every step), the prefill's activations (a full box: T rows) and
    the decode step's (its rows of the prefill's T, at least `MIN_ROW_FRACTION`)."""
    weights = [key for key in nodes if key.startswith("W:")]
    wx, wy = [], []
    for key in weights:
        x, y = _box(nodes[key], BOX_H)
        wx += x
        wy += y
    tied_stops = [key[2:] for key in weights if tied and key in ("W:embed", "W:lm_head")]
    traces = [{"type": "scatter", "name": "weights", "x": wx, "y": wy, "mode": "lines", "fill": "toself",
               "fillcolor": WEIGHT_FILL, "line": {"color": "#8c959f", "width": 1}, "hoverinfo": "skip",
               "meta": {"stops": escaped(key[2:] for key in weights), "tied": tied_stops}}]
    full_rows = len(stages.prefill.input_ids)
    for trace, ops, fill, line in ((stages.prefill, stages.prefill_ops, PREFILL_FILL, PREFILL_COLOUR),
                                   (stages.decode, stages.decode_ops, DECODE_COLOUR, DECODE_COLOUR)):
        if trace is None:
            continue
        drawn = [key for key in nodes if key in ops and key in stages.prefill_ops and not _is_plus(key)]
        xs, ys = [], []
        for key in drawn:
            x, y = _box(nodes[key], BOX_H * max(_rows_of(ops[key], trace) / full_rows, MIN_ROW_FRACTION))
            xs += x
            ys += y
        traces.append({"type": "scatter", "name": step_label(trace), "x": xs, "y": ys, "mode": "lines",
                       "fill": "toself", "fillcolor": fill, "line": {"color": line, "width": 1},
                       "hoverinfo": "skip", "meta": {"rows": len(trace.input_ids), "stops": escaped(drawn)}})
    return traces


def _is_plus(key: str) -> bool:
    return parse_stop_name(key)[1] in RESIDUALS


def _kv_strips(nodes: dict[str, Node], stages: Stages, layer: int) -> dict:
    """The shown layer's KV cache after each step: a strip of n positions on one scale (the longest
    n), the positions written by the step filled: all T at the prefill, the last one at a decode step."""
    node = nodes["kv_cache"]
    lengths = [trace.kv[layer].key_shape[2] for trace in stages.traces]
    longest = max(lengths)
    left = node.x - node.w / 2
    xs, ys = [], []
    for index, (trace, n) in enumerate(zip(stages.traces, lengths, strict=True)):
        y = node.y - 0.05 - 0.36 * index
        right = left + node.w * n / longest
        start = left + node.w * (n - min(len(trace.input_ids), n)) / longest
        for x0 in (left, start):  # the strip, then the positions this step wrote
            xs += [x0, right, right, x0, x0, None]
            ys += [y, y, y + 0.28, y + 0.28, y, None]
        if longest <= MAX_KV_TICKS:
            for position in range(1, n):
                tick = left + node.w * position / longest
                xs += [tick, tick, None]
                ys += [y, y + 0.28, None]
    return {"type": "scatter", "name": "kv cache", "x": xs, "y": ys, "mode": "lines", "fill": "toself",
            "fillcolor": "rgba(213, 94, 0, 0.30)", "line": {"color": "#6e7781", "width": 0.6},
            "hoverinfo": "skip", "meta": {"positions": lengths}}


def _glyphs(nodes: dict[str, Node], stages: Stages) -> list[dict]:
    """What the scores and GQA stops do, drawn above them: the scores as a T x n triangle (prefill)
    and a 1 x n row (decode step) on one scale; each KV head joined to its g query heads."""
    traces = []
    scores = next((key for key in nodes if key.endswith("attn.scores")), None)
    if scores is not None:
        node = nodes[scores]
        side_x, side_y = node.w * 0.8, 0.7
        left, low = node.x - side_x / 2, node.y + BOX_H / 2 + 0.18
        prefill_n = stages.prefill_ops[scores].output_shapes[0][-1]
        longest = max(stages.decode_ops[scores].output_shapes[0][-1] if stages.decode else 0, prefill_n)
        right = left + side_x * prefill_n / longest
        traces.append({"type": "scatter", "name": "scores: prefill", "mode": "lines", "fill": "toself",
                       "x": [left, left, right, left], "y": [low + side_y, low, low, low + side_y],
                       "fillcolor": PREFILL_FILL, "line": {"color": PREFILL_COLOUR, "width": 1}, "hoverinfo": "skip"})
        if stages.decode is not None:
            row = side_y * max(1 / len(stages.prefill.input_ids), MIN_ROW_FRACTION)
            x, y = _box(Node("", node.x, 0, 0, side_x), row, bottom=low - row - 0.04)
            traces.append({"type": "scatter", "name": "scores: decode", "mode": "lines", "fill": "toself",
                           "x": x, "y": y, "fillcolor": DECODE_COLOUR, "line": {"color": DECODE_COLOUR, "width": 1},
                           "hoverinfo": "skip"})
    gqa = next((key for key in nodes if key.endswith("attn.gqa_expand")), None)
    if gqa is not None:
        traces.append(_gqa_glyph(nodes[gqa], stages.prefill_ops[gqa]))
    return traces


def _gqa_glyph(node: Node, op: OpRecord) -> dict:
    """h_kv KV heads (bottom row) each joined to its g query heads (top row)."""
    n_kv, n_q = op.input_shapes[0][1], op.output_shapes[0][1]
    group = n_q // n_kv
    width, bottom, top = node.w * 0.85, node.y + BOX_H / 2 + 0.2, node.y + BOX_H / 2 + 0.8
    q_x = [node.x - width / 2 + width * (h + 0.5) / n_q for h in range(n_q)]
    kv_x = [node.x - width / 2 + width * (h + 0.5) / n_kv for h in range(n_kv)]
    xs, ys = [], []
    for h in range(n_q):
        xs += [kv_x[h // group], q_x[h], None]
        ys += [bottom, top, None]
    return {"type": "scatter", "name": "gqa groups", "mode": "lines+markers", "x": xs, "y": ys,
            "line": {"color": DIM_COLOURS["h_kv"], "width": 1},
            "marker": {"size": 4, "color": DIM_COLOURS["h_q"]}, "hoverinfo": "skip"}


def _spine(rows: list[list[Column]], nodes: dict[str, Node]) -> dict:
    """The residual stream: one thick line per row, along its whole width."""
    xs, ys = [], []
    for index, row in enumerate(rows):
        y = next(node.y for node in nodes.values() if node.row == index and node.key == _spine_key(row))
        xs += [0.0, _row_width(row), None]
        ys += [y, y, None]
    return {"type": "scatter", "name": "residual stream", "x": xs, "y": ys, "mode": "lines",
            "line": {"color": SPINE_COLOUR, "width": 9}, "hoverinfo": "skip"}


def _spine_key(row: list[Column]) -> str:
    """A stop of `row` on the spine, or (a row of branch stops only) its first stop, whose row sets y."""
    for column in row:
        if column.branch == "spine":
            return column.stops[0]
    return row[0].stops[0]


def _edges(rows: list[list[Column]], nodes: dict[str, Node]) -> dict:
    """Data flow between consecutive columns: from every open output to each stop of the next column
    (stacked columns pair up by slot; a stacked stop with no partner flows on to the next column).
    An edge between rows leaves its row on the right and enters the next on the left."""
    xs, ys = [], []
    open_ends: list[str] = []
    for column in (column for row in rows for column in row):
        targets = list(column.stops)
        matched: list[str] = []
        for target in targets:
            same_slot = [end for end in open_ends if len(targets) > 1 and len(open_ends) > 1
                         and _slot_of(end) == _slot_of(target)]
            sources = same_slot or open_ends
            matched += sources
            weight = nodes.get("W:" + target)
            beside = weight is not None and weight.y == nodes[target].y  # a stacked stop: x meets W first
            for source in sources:
                _edge(xs, ys, nodes[source], weight if beside else nodes[target], rows)
            if weight is not None:  # the weight flows into its stop
                _link(xs, ys, weight, nodes[target])
        open_ends = targets + [end for end in open_ends if end not in matched]
    write = next((key for key in nodes if key.endswith("attn.kv_cache_write")), None)
    if write is not None:  # the cache write appends to the KV cache
        xs += [nodes[write].x, nodes[write].x, None]
        ys += [nodes[write].y + BOX_H / 2, nodes["kv_cache"].y - 0.4, None]
    return {"type": "scatter", "name": "edges", "x": xs, "y": ys, "mode": "lines",
            "line": {"color": EDGE_COLOUR, "width": 1.4}, "hoverinfo": "skip"}


def _slot_of(stop: str) -> int:
    return PARALLEL_SLOTS.get(parse_stop_name(stop)[1], 0)


def _edge(xs: list, ys: list, source: Node, target: Node, rows: list[list[Column]]) -> None:
    """A line from `source`'s right side to `target`'s left side; across rows, two stubs."""
    start, end = source.x + source.w / 2, target.x - target.w / 2
    if source.row == target.row:
        xs += [start, end, None]
        ys += [source.y, target.y, None]
        return
    xs += [start, _row_width(rows[source.row]), None, -0.5, end, None]
    ys += [source.y, source.y, None, target.y, target.y, None]


def _link(xs: list, ys: list, weight: Node, stop: Node) -> None:
    """A weight's line into its stop: sideways from a weight on its left, else from above or below."""
    if weight.y == stop.y:
        xs += [weight.x + weight.w / 2, stop.x - stop.w / 2, None]
        ys += [weight.y, stop.y, None]
        return
    toward = 1 if stop.y > weight.y else -1
    xs += [weight.x, stop.x, None]
    ys += [weight.y + toward * BOX_H / 2, stop.y - toward * BOX_H / 2, None]


def _plus_markers(nodes: dict[str, Node]) -> dict:
    """The residual adds: a "+" on the spine where a branch rejoins it."""
    pluses = [node for key, node in nodes.items() if _is_plus(key)]
    return {"type": "scatter", "name": "residual adds", "x": [n.x for n in pluses], "y": [n.y for n in pluses],
            "mode": "markers+text", "text": ["+"] * len(pluses), "textposition": "middle center",
            "textfont": {"size": 18, "color": "#24292f"}, "hoverinfo": "skip",
            "marker": {"size": 24, "color": "#ffffff", "line": {"color": "#24292f", "width": 2}}}


def _labels(nodes: dict[str, Node], stages: Stages, tied: bool) -> dict:
    """Each node's name and measured output shapes (prefill blue, decode orange); each weight's name
    and shape; the KV strip's n per step."""
    keys, xs, ys, texts = [], [], [], []
    for key, node in nodes.items():
        if _is_plus(key):
            continue
        keys.append(key)
        xs.append(node.x)
        ys.append(node.y + (0.05 if key in stages.prefill_ops else 0.0))
        texts.append(node_label(key, stages, tied))
    return {"type": "scatter", "name": "labels", "x": xs, "y": ys, "mode": "text", "text": texts,
            "customdata": escaped(keys), "textposition": "middle center", "hoverinfo": "skip",
            "textfont": {"family": "ui-monospace, Menlo, Consolas, monospace", "size": 10, "color": "#24292f"}}


def _hover_trace(nodes: dict[str, Node], stages: Stages, tied: bool) -> dict:
    """Invisible markers over the nodes carrying each node's hover (shown on a click too)."""
    keys = list(nodes)
    return {"type": "scatter", "name": "nodes", "x": [nodes[k].x for k in keys], "y": [nodes[k].y for k in keys],
            "mode": "markers", "customdata": escaped(keys), "hovertext": [node_hover(key, stages, tied) for key in keys],
            "hovertemplate": "%{hovertext}<extra></extra>",
            "marker": {"size": 34, "symbol": "square", "color": "rgba(0,0,0,0)"}}


def _frames(rows: list[list[Column]], nodes: dict[str, Node]) -> list[dict]:
    """A dashed frame around the layer's stops in each row: the layer drawn once, run L times."""
    shapes = []
    for index in range(len(rows)):
        inside = [node for node in nodes.values() if node.row == index
                  and (parse_stop_name(node.key.removeprefix("W:"))[0] is not None or node.key == "kv_cache")]
        if not inside:
            continue
        left = min(node.x - node.w / 2 for node in inside) - 1
        right = max(node.x + node.w / 2 for node in inside) + 1
        ys = [node.y for node in nodes.values() if node.row == index]
        shapes.append({"type": "rect", "xref": "x", "yref": "y", "x0": left, "x1": right,
                       "y0": min(ys) - 0.5, "y1": max(ys) + 0.5, "layer": "below", "fillcolor": "rgba(0,0,0,0)",
                       "line": {"color": FRAME_COLOUR, "dash": "dash", "width": 1.5}})
    return shapes


def _notes(nodes: dict[str, Node], stages: Stages, n_layers: int, width: float, top: float) -> list[dict]:
    """The "x L" mark, the branches' names, the key to the colours and the dimensions' values."""
    notes = [{"text": f"<b>×{n_layers}</b> layers", "x": width, "y": top + 0.45, "xref": "x",
              "yref": "y", "xanchor": "right", "yanchor": "top", "showarrow": False,
              "font": {"size": 14, "color": FRAME_COLOUR}}]
    attention = next(node for key, node in nodes.items() if key.endswith(".input_norm"))
    notes.append({"text": "<b>attention</b> above the residual stream, <b>MLP</b> below; each adds at a <b>+</b>",
                  "x": attention.x - attention.w / 2,
                  "y": top + 0.45, "xref": "x", "yref": "y", "xanchor": "left", "yanchor": "top",
                  "showarrow": False, "font": {"size": 13, "color": FRAME_COLOUR}})
    key = [f'<span style="color:{PREFILL_TEXT}">■ {step_label(stages.prefill)}: a box is '
           f"T = {len(stages.prefill.input_ids)} rows</span>"]
    if stages.decode is not None:
        key.append(f'<span style="color:{DECODE_TEXT}">■ {step_label(stages.decode)}: '
                   f"{len(stages.decode.input_ids)} row</span>")
    key.append('<span style="color:#57606a">■ weights: the same every step</span>')
    notes.append({"text": " · ".join(key) + " · " + dimension_values(stages), "x": 0, "y": 0,
                  "xref": "paper", "yref": "paper", "xanchor": "left", "yanchor": "top", "yshift": -6,
                  "showarrow": False, "font": {"size": 12}, "align": "left"})
    return notes


