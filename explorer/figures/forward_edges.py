"""The forward-pass diagram's lines: the residual stream (one thick line per row) and the data flow
from stop to stop, weight to stop and cache write to KV cache, over the nodes placed by
`explorer.figures.forward_layout.place_nodes` (x in characters, y in slots).
"""

from __future__ import annotations

from explorer.figures.forward_layout import BOX_H, PARALLEL_SLOTS, Column, Node, row_width
from explorer.stop_names import parse_stop_name

EDGE_COLOUR, SPINE_COLOUR = "#9a9a9a", "#c9c9c9"


def spine_trace(rows: list[list[Column]], nodes: dict[str, Node]) -> dict:
    """The residual stream: one thick line per row, along its whole width."""
    xs, ys = [], []
    for index, row in enumerate(rows):
        y = next(node.y for node in nodes.values() if node.row == index and node.key == _spine_key(row))
        xs += [0.0, row_width(row), None]
        ys += [y, y, None]
    return {"type": "scatter", "name": "residual stream", "x": xs, "y": ys, "mode": "lines",
            "line": {"color": SPINE_COLOUR, "width": 9}, "hoverinfo": "skip"}


def _spine_key(row: list[Column]) -> str:
    """A stop of `row` on the spine, or (a row of branch stops only) its first stop, whose row sets y."""
    for column in row:
        if column.branch == "spine":
            return column.stops[0]
    return row[0].stops[0]


def edge_trace(rows: list[list[Column]], nodes: dict[str, Node]) -> dict:
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
    xs += [start, row_width(rows[source.row]), None, -0.5, end, None]
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
