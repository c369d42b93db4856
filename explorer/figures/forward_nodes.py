"""The forward-pass diagram's nodes, drawn: the weights' and activations' boxes at one scale, the KV
cache strip, the glyphs of the scores and GQA stops, the residual adds, the labels and the hovers.

Each function returns plotly trace dicts over the nodes placed by
`explorer.figures.forward_layout.place_nodes` (x in characters, y in slots).
"""

from __future__ import annotations

from explorer.figures.dims import DIM_COLOURS
from explorer.figures.forward_layout import BOX_H, Node, is_plus
from explorer.figures.forward_text import Stages, escaped, node_hover, node_label
from explorer.figures.theme import DECODE_COLOUR, PREFILL_COLOUR
from explorer.journey import step_label
from explorer.trace import OpRecord, StepTrace

MIN_ROW_FRACTION = 0.07  # the thinnest box drawn, as a fraction of a full one (1 row of a long prompt)
MAX_KV_TICKS = 96  # position ticks on the KV strip up to this many positions
WEIGHT_FILL = "#ececec"
PREFILL_FILL = "#d6e6f5"


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


def box_traces(nodes: dict[str, Node], stages: Stages, tied: bool) -> list[dict]:
    """The weights (grey, one size for every step), every stop's frame (white, the full box), the
    prefill's activations (its rows of T: a full box but at the LM head and after) and the decode
    step's (its rows of the prefill's T, at least `MIN_ROW_FRACTION`)."""
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
    # every stop's frame, the full box: a node whose step fills few rows of T (the LM head, sample,
    # detokenize) is still a box, drawn over the residual stream rather than on it
    frames = [key for key in nodes if key in stages.prefill_ops and not is_plus(key)]
    fx, fy = [], []
    for key in frames:
        x, y = _box(nodes[key], BOX_H)
        fx += x
        fy += y
    traces.append({"type": "scatter", "name": "frames", "x": fx, "y": fy, "mode": "lines", "fill": "toself",
                   "fillcolor": "#ffffff", "line": {"color": PREFILL_COLOUR, "width": 1}, "hoverinfo": "skip",
                   "meta": {"stops": escaped(frames)}})
    full_rows = len(stages.prefill.input_ids)
    for trace, ops, fill, line in ((stages.prefill, stages.prefill_ops, PREFILL_FILL, PREFILL_COLOUR),
                                   (stages.decode, stages.decode_ops, DECODE_COLOUR, DECODE_COLOUR)):
        if trace is None:
            continue
        drawn = [key for key in nodes if key in ops and key in stages.prefill_ops and not is_plus(key)]
        xs, ys = [], []
        for key in drawn:
            x, y = _box(nodes[key], BOX_H * max(_rows_of(ops[key], trace) / full_rows, MIN_ROW_FRACTION))
            xs += x
            ys += y
        traces.append({"type": "scatter", "name": step_label(trace), "x": xs, "y": ys, "mode": "lines",
                       "fill": "toself", "fillcolor": fill, "line": {"color": line, "width": 1},
                       "hoverinfo": "skip", "meta": {"rows": len(trace.input_ids), "stops": escaped(drawn)}})
    return traces


def kv_strip_trace(nodes: dict[str, Node], stages: Stages, layer: int) -> dict:
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


def glyph_traces(nodes: dict[str, Node], stages: Stages) -> list[dict]:
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


def plus_trace(nodes: dict[str, Node]) -> dict:
    """The residual adds: a "+" on the spine where a branch rejoins it."""
    pluses = [node for key, node in nodes.items() if is_plus(key)]
    return {"type": "scatter", "name": "residual adds", "x": [n.x for n in pluses], "y": [n.y for n in pluses],
            "mode": "markers+text", "text": ["+"] * len(pluses), "textposition": "middle center",
            "textfont": {"size": 18, "color": "#24292f"}, "hoverinfo": "skip",
            "marker": {"size": 24, "color": "#ffffff", "line": {"color": "#24292f", "width": 2}}}


def label_trace(nodes: dict[str, Node], stages: Stages, tied: bool) -> dict:
    """Each node's name and measured output shapes (prefill blue, decode orange); each weight's name
    and shape; the KV strip's n per step."""
    keys, xs, ys, texts = [], [], [], []
    for key, node in nodes.items():
        if is_plus(key):
            continue
        keys.append(key)
        xs.append(node.x)
        ys.append(node.y + (0.05 if key in stages.prefill_ops else 0.0))
        texts.append(node_label(key, stages, tied))
    return {"type": "scatter", "name": "labels", "x": xs, "y": ys, "mode": "text", "text": texts,
            "customdata": escaped(keys), "textposition": "middle center", "hoverinfo": "skip",
            "textfont": {"family": "ui-monospace, Menlo, Consolas, monospace", "size": 10, "color": "#24292f"}}


def hover_trace(nodes: dict[str, Node], stages: Stages, tied: bool) -> dict:
    """Invisible markers over the nodes carrying each node's hover (shown on a click too)."""
    keys = list(nodes)
    return {"type": "scatter", "name": "nodes", "x": [nodes[k].x for k in keys], "y": [nodes[k].y for k in keys],
            "mode": "markers", "customdata": escaped(keys),
            "hovertext": [node_hover(key, stages, tied) for key in keys], "hovertemplate": "%{hovertext}<extra></extra>",
            "marker": {"size": 34, "symbol": "square", "color": "rgba(0,0,0,0)"}}
