"""FlashAttention's tiles' figure: one query row's scores block by block, and the online softmax's
running max, running sum and partial output after each block, as a strip over the keys."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.theme import (
    DECODE_COLOUR,
    PREFILL_COLOUR,
    plain_label,
    set_layout,
    si_text,
    subplot_grid,
    visible_piece,
)
from explorer.lab.tiles import TilesResult, blocks_text

BLOCK_COLOURS = (PREFILL_COLOUR, "#56B4E9")  # alternate blocks, so that their edges show
COMPONENT_COLOURS = ("#009E73", "#CC79A7", "#E69F00")


def fig_tiles(result: TilesResult) -> go.Figure:
    """Four strips over the row's n keys: the scores (computed; each block in turn coloured), then
    after each block (at its last key) the running max m with each block's own max, the running sum l,
    and the partial output õ_j / l_j's first components against the eager row's (dashed). The title
    says whether the tiled row equals the eager one and what memory the tiles spare.

    Returns:
        A figure with `layout.meta == {"view": "lab-tiles", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(
        [f"the row's {r.keys} scores q·Kᵀ·scale, {r.block} keys a block (computed; a kernel holds one block)",
         "running max m after each block (computed), and each block's own max",
         "running sum l = Σ exp(s - m) (computed; rescaled by exp(m_old - m_new) when m rises)",
         "partial output õ/l, first components (computed); dashed: the eager row's"],
        rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.075)
    layout["xaxis4"].update(title={"text": "key position (m, l and õ/l: their value after the block above them)"},
                            range=[-0.5, r.keys - 0.5])
    fig = go.Figure(layout=layout)
    key_index = np.arange(r.keys)
    edges = np.append(np.arange(r.blocks) * r.block, r.keys) - 0.5  # each block spans its keys
    centres = (edges[:-1] + edges[1:]) / 2
    fig.add_trace(go.Bar(x=key_index, y=r.scores, marker_color=[BLOCK_COLOURS[k // r.block % 2] for k in key_index],
                         name="scores", showlegend=False, customdata=key_index // r.block,
                         hovertemplate="key %{x}, block %{customdata}: score %{y:.4g}<extra></extra>", **axes[(1, 1)]))
    fig.add_trace(_after_blocks(edges, r.running_max, "m", DECODE_COLOUR, axes[(2, 1)]))
    fig.add_trace(go.Scatter(x=centres, y=r.block_max, mode="markers", name="block max", showlegend=False,
                             marker={"color": "#777777", "symbol": "diamond", "size": 6},
                             hovertemplate="block max %{y:.4g}<extra></extra>", **axes[(2, 1)]))
    fig.add_trace(_after_blocks(edges, r.running_sum, "l", DECODE_COLOUR, axes[(3, 1)]))
    for component in range(r.partial_components.shape[1]):
        colour = COMPONENT_COLOURS[component % len(COMPONENT_COLOURS)]
        fig.add_trace(_after_blocks(edges, r.partial_components[:, component], f"õ/l [{component}]", colour,
                                    axes[(4, 1)], legend=True))
        fig.add_trace(go.Scatter(x=edges[[0, -1]], y=[r.direct_output[component]] * 2, mode="lines",
                                 line={"color": colour, "dash": "dash", "width": 1}, showlegend=False,
                                 hoverinfo="skip", **axes[(4, 1)]))
    query = plain_label(visible_piece(r.query_piece, 20))
    verdict = "equal to" if r.equal else "DIFFERENT from"
    title = (f"FlashAttention's tiles: layer {r.layer}, head {r.head}, query {r.position} ({query}) over {r.keys} keys "
             f"in {blocks_text(r.blocks)} of {r.block}<br>online softmax {verdict} the eager row (max |Δo| "
             f"{r.max_abs_diff:.1g}); the layer's scores, {si_text(r.scores_bytes, 'B')}, never held: "
             f"{si_text(r.tile_bytes, 'B')} of tiles instead (computed)")
    lab_frame(fig, "tiles", title, 560, left=70, bottom=90)
    return set_layout(fig, legend={"orientation": "h", "y": -0.13, "x": 1, "xanchor": "right", "yanchor": "top"},
                      bargap=0.05)


def _after_blocks(edges: np.ndarray, values: np.ndarray, name: str, colour: str, axes: dict[str, str],
                  legend: bool = False) -> go.Scatter:
    """A step line holding each block's value (`values`, [blocks]) across that block's keys, `edges`
    [blocks + 1] the blocks' bounds in key positions."""
    return go.Scatter(x=edges, y=np.append(values, values[-1]), mode="lines", line_shape="hv", name=name,
                      line={"color": colour, "width": 2}, showlegend=legend,
                      hovertemplate=f"{name} %{{y:.5g}}<extra></extra>", **axes)
