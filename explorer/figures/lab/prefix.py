"""Prefix caching's figure: the two requests' tokens (the reused prefix, the computed suffix), then
what each way computed, cost and took, side by side."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.theme import (
    DECODE_COLOUR,
    PREFILL_COLOUR,
    base_layout,
    plain_label,
    set_layout,
    subplot_grid,
    visible_piece,
)
from explorer.lab.prefix import PrefixCacheResult, shape_text

REUSED_COLOUR = "#009E73"  # the prefix read from request A's cache


def fig_prefix(result: PrefixCacheResult) -> go.Figure:
    """Top: request B's tokens as one bar each way (the full prefill computes all T; the cached one
    reads P from A's cache and computes T_s); bottom: the two ways' FLOPs (estimated) and wall time
    (measured) as bars. The title says whether the logits and greedy tokens agree.

    Returns:
        A figure with `layout.meta == {"view": "lab-prefix", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(["Request B's tokens: reused from A's KV cache or computed",
                                 "FLOPs (estimated) and time (measured)"], rows=2, cols=1, vertical_spacing=0.22)
    layout["xaxis"].update(title={"text": "tokens"}, range=[0, r.total_tokens * 1.9])
    layout["yaxis2"].update(rangemode="tozero")
    fig = go.Figure(layout=layout)
    ways = ["full prefill", "suffix on A's cache"]
    prefix_text = plain_label(visible_piece("".join(r.pieces[:r.prefix_tokens]), 60))
    suffix_text = plain_label(visible_piece("".join(r.pieces[r.prefix_tokens:r.total_tokens]), 40))
    for name, colour, widths, text in (
            ("computed (prefix)", PREFILL_COLOUR, [r.prefix_tokens, 0], [prefix_text, ""]),
            ("reused from A's cache", REUSED_COLOUR, [0, r.prefix_tokens], ["", prefix_text]),
            ("computed (B's own)", DECODE_COLOUR, [r.suffix_tokens, r.suffix_tokens], [suffix_text] * 2)):
        fig.add_trace(go.Bar(y=ways, x=widths, orientation="h", name=name, marker_color=colour, text=text,
                             textposition="inside", insidetextanchor="middle", **axes[(1, 1)]))
    shapes = [f"input {shape_text(r.full_input_shape)}", f"input {shape_text(r.suffix_input_shape)}, "
              f"cache {shape_text(r.reused_kv_shape)} -> n = {r.final_kv_shape[2]}"]
    fig.add_trace(go.Scatter(y=ways, x=[r.total_tokens] * 2, mode="text", text=shapes, textposition="middle right",
                             showlegend=False, hoverinfo="skip", **axes[(1, 1)]))
    costs = [("GFLOPs (estimated)", [r.full_flops / 1e9, r.suffix_flops / 1e9]),
             ("ms (measured)", [r.full_ms, r.suffix_ms])]
    for (label, values), colour in zip(costs, ("#999999", "#555555"), strict=True):
        fig.add_trace(go.Bar(x=[f"{label}<br>{way}" for way in ways], y=values, marker_color=colour, showlegend=False,
                             text=[f"{value:.3g}" for value in values], textposition="outside", **axes[(2, 1)]))
    title = (f"Prefix caching: B reuses {r.prefix_tokens} of its {r.total_tokens} tokens; "
             f"{1 - r.suffix_flops / r.full_flops:.0%} fewer FLOPs, {r.full_ms / max(r.suffix_ms, 1e-9):.1f}x faster; "
             f"logits max |Δ| {r.max_abs_diff:.1g}, greedy tokens {'identical' if r.same_tokens else 'DIFFER'}")
    base_layout(fig, "lab-prefix", None, title, height=520)
    return set_layout(fig, barmode="stack", legend={"orientation": "h", "y": 1.02, "x": 0, "yanchor": "bottom"},
                      margin={"l": 150, "r": 30, "t": 90, "b": 60})
