"""Prefix caching's figure: request B's tokens each way (the reused prefix, the computed suffix), and
what each way cost and took, side by side."""

from __future__ import annotations

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
from explorer.lab.prefix import PrefixCacheResult, shape_text, time_change

REUSED_COLOUR = "#009E73"  # the prefix read from request A's cache
WAYS = ("full prefill", "suffix on A's cache")


def fig_prefix(result: PrefixCacheResult) -> go.Figure:
    """Left: request B's tokens as one bar each way (the full prefill computes all T; the cached way
    reads P positions from A's cache and computes T_s), with each way's measured input and cache
    shapes; right: each way's FLOPs (estimated) and wall time (measured) as a share of the full
    prefill's. The title says whether the logits and greedy tokens agree.

    Returns:
        A figure with `layout.meta == {"view": "lab-prefix", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(["Request B's tokens: computed, or reused from A's KV cache",
                                 "Cost, % of the full prefill"], cols=2, column_widths=[0.72, 0.28],
                                horizontal_spacing=0.08)
    layout["xaxis"].update(title={"text": "tokens"}, range=[0, r.total_tokens * 1.75])
    # room for a slower cached pass's bar (above 100%) and its label
    layout["yaxis2"].update(range=[0, max(145, 100 * r.suffix_ms / r.full_ms + 45)], ticksuffix="%")
    fig = go.Figure(layout=layout)
    _token_bars(fig, r, axes[(1, 1)])
    _cost_bars(fig, r, axes[(1, 2)])
    title = (f"Prefix caching: B reuses {r.prefix_tokens} of its {r.total_tokens} tokens: "
             f"{1 - r.suffix_flops / r.full_flops:.0%} fewer FLOPs (estimated), "
             f"{time_change(r.suffix_ms, r.full_ms)} (measured); logits max |Δ| {r.max_abs_diff:.1g} "
             f"(measured), greedy tokens {'identical' if r.same_tokens else 'DIFFERENT'}")
    lab_frame(fig, "prefix", title, 350, legend=True, left=130, bottom=40)
    return set_layout(fig, barmode="stack")


def _token_bars(fig: go.Figure, r: PrefixCacheResult, cell: dict) -> None:
    """One stacked bar per way: prefix computed or reused, then B's own tokens, shapes at the right."""
    prefix_text = plain_label(visible_piece("".join(r.pieces[:r.prefix_tokens]), 50))
    for name, colour, widths, text in (
            ("prefix computed", PREFILL_COLOUR, [r.prefix_tokens, 0], [prefix_text, ""]),
            ("prefix reused from A's cache", REUSED_COLOUR, [0, r.prefix_tokens], ["", prefix_text]),
            ("B's own tokens, computed", DECODE_COLOUR, [r.suffix_tokens, r.suffix_tokens], ["", ""])):
        fig.add_trace(go.Bar(y=WAYS, x=widths, orientation="h", name=name, marker_color=colour, text=text,
                             textposition="inside", insidetextanchor="middle", hoverinfo="x+name", **cell))
    shapes = [f"input {shape_text(r.full_input_shape)}",
              f"input {shape_text(r.suffix_input_shape)},<br>cache {shape_text(r.reused_kv_shape)} → n = "
              f"{r.final_kv_shape[2]}"]
    fig.add_trace(go.Scatter(y=WAYS, x=[r.total_tokens * 1.02] * 2, mode="text", text=shapes,
                             textposition="middle right", showlegend=False, hoverinfo="skip", **cell))


def _cost_bars(fig: go.Figure, r: PrefixCacheResult, cell: dict) -> None:
    """FLOPs (estimated) and time (measured), each way as a share of the full prefill's."""
    for way, colour, flops, ms in ((WAYS[0], PREFILL_COLOUR, r.full_flops, r.full_ms),
                                   (WAYS[1], REUSED_COLOUR, r.suffix_flops, r.suffix_ms)):
        fig.add_trace(go.Bar(x=["FLOPs<br>(estimated)", "time<br>(measured)"],
                             y=[100 * flops / r.full_flops, 100 * ms / r.full_ms], marker_color=colour,
                             text=[si_text(flops, "FLOP").replace(" ", "<br>"), f"{ms:.0f}<br>ms"],
                             textposition="outside", name=way,
                             constraintext="none", cliponaxis=False,  # the labels at the text's size, whole
                             showlegend=False, offsetgroup=way, **cell))
