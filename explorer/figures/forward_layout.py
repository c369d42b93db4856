"""The forward-pass diagram's geometry: which stops share a column, how columns wrap into rows, and
where every node's centre lies.

x is measured in characters of the labels' monospace font, y in slots (a node and its gap): the
residual stream (the spine) at slot 0 of its row, the attention sub-layer above it, the MLP sub-layer
below it. Pure: labels are measured from `explorer.figures.forward_text.node_label`; nothing is drawn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.figures.forward_text import Stages, node_label
from explorer.stop_names import parse_stop_name
from explorer.trace import OpRecord

# x is measured in characters of the labels' monospace font (10 px: about 6.1 px a character), so a
# row of ROW_CHARS fills a figure about 1,240 px wide (a 1280x720 screen) and every label fits its box.
ROW_CHARS = 200
PRESENTER_ROW_CHARS = 132  # presenter mode's text is 1.5x larger: fewer characters per row
SLOT_PX = 50  # one vertical slot (a node and its gap), in pixels
BOX_H = 0.86  # a node's height, in slots
MIN_BOX_CHARS = 8  # the narrowest node
GAP_CHARS = 1.0  # between two nodes side by side (a 9-head attention row, per-head shapes whole, fits)
PLUS_CHARS = 5
KV_CHARS = 26  # the KV-cache strip's width, ending over the cache write's right edge
# Stops computed side by side, stacked in one column, at these slots (1 = next to the spine).
PARALLEL_SLOTS = {"attn.q_proj": 3, "attn.k_proj": 2, "attn.v_proj": 1, "attn.q_norm": 3, "attn.k_norm": 2,
                  "mlp.gate_proj": 1, "mlp.up_proj": 2}
PARALLEL_GROUPS = {"attn.q_proj": "qkv", "attn.k_proj": "qkv", "attn.v_proj": "qkv", "attn.q_norm": "qk_norm",
                   "attn.k_norm": "qk_norm", "mlp.gate_proj": "gate_up", "mlp.up_proj": "gate_up"}
RESIDUALS = ("attn_residual", "mlp_residual")


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
    if is_plus(stops[0]):
        return Column(stops, branch, PLUS_CHARS, PLUS_CHARS)
    box = max(MIN_BOX_CHARS, *(_label_chars(stop, stages, tied) for stop in stops)) + 0.5
    if len(stops) == 1:
        return Column(stops, branch, box + GAP_CHARS, box)
    weights = [stop for stop in stops if has_weight(stages.prefill_ops[stop])]
    weight_box = max((_label_chars("W:" + stop, stages, tied) for stop in weights), default=0) + 1 if weights else 0
    return Column(stops, branch, box + (weight_box + GAP_CHARS if weights else 0) + GAP_CHARS, box, weight_box)


def _label_chars(key: str, stages: Stages, tied: bool) -> int:
    """The longest line of a node's label, in characters (the label without its markup)."""
    text = node_label(key, stages, tied)
    return max(len(re.sub(r"<[^>]+>", "", line)) for line in text.split("<br>"))


def row_width(row: list[Column]) -> float:
    """The row's width in characters: its columns' widths, gaps included."""
    return sum(column.width for column in row)


def wrap_rows(columns: list[Column], row_chars: float) -> list[list[Column]]:
    """The columns cut into rows of at most `row_chars` characters, but for a residual add, which closes
    the row of the sub-layer it ends (its circle fits the figure's margin); the MLP sub-layer starts a row."""
    rows: list[list[Column]] = [[]]
    for column, previous in zip(columns, [None, *columns[:-1]], strict=True):
        mlp_starts = column.branch == "mlp" and previous is not None and previous.branch == "spine"
        too_wide = row_width(rows[-1]) + column.width > row_chars and not is_plus(column.stops[0])
        if rows[-1] and (too_wide or mlp_starts):
            rows.append([])
        rows[-1].append(column)
    return rows


def _slots(column: Column) -> list[tuple[str, float]]:
    """(stop, slot) of each stop in `column`: 0 on the spine, > 0 above it, < 0 below it."""
    if column.branch == "spine":
        return [(column.stops[0], 0.0)]
    sign = 1.0 if column.branch == "attn" else -1.0
    return [(stop, sign * PARALLEL_SLOTS.get(parse_stop_name(stop)[1], 1)) for stop in column.stops]


def place_nodes(rows: list[list[Column]], stages: Stages) -> tuple[dict[str, Node], tuple[float, float]]:
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
                if has_weight(stages.prefill_ops[stop]):
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


def has_weight(op: OpRecord) -> bool:
    """The stop multiplies by a learned weight drawn as its own node: a GEMM, a norm's scale, the embedding."""
    return op.kind in ("gemm", "norm") or op.name == "embed"


def is_plus(key: str) -> bool:
    """The node is a residual add, drawn as a "+" on the spine."""
    return parse_stop_name(key)[1] in RESIDUALS
