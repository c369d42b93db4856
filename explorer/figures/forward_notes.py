"""The forward-pass diagram's marks around its nodes: the dashed frame of the layer (drawn once, run
L times), the "x L" mark, the branches' names and the key to the colours and dimensions.
"""

from __future__ import annotations

from explorer.figures.forward_layout import Column, Node
from explorer.figures.forward_text import DECODE_TEXT, PREFILL_TEXT, Stages, dimension_values
from explorer.journey import step_label
from explorer.stop_names import parse_stop_name

FRAME_COLOUR = "#6e7781"


def layer_frames(rows: list[list[Column]], nodes: dict[str, Node]) -> list[dict]:
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


def layer_notes(nodes: dict[str, Node], stages: Stages, n_layers: int, width: float, top: float) -> list[dict]:
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
