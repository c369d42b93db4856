"""Expert parallelism's figure: where the first MoE layer's (token, expert) pairs went in the prefill
(from each rank's tokens to each expert, grouped by the rank holding it), and each layer's time in the
all-to-alls and the all-gather against its compute."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.lab.tensor import COMM_COLOUR, RANK_COLOURS
from explorer.figures.theme import PREFILL_COLOUR, set_layout, si_text, subplot_grid
from explorer.lab.experts import ExpertParallelResult

GATHER_COLOUR = "#CC79A7"
COUNT_COLOURS = [[0, "#f7fbff"], [1, "#08306b"]]
LABEL_SHARE = 0.15  # a bar segment is labelled where it is this much of the tallest layer's bar, or more
MOST_LABELLED = 8  # layers whose bars are wide enough for a label


def fig_experts(result: ExpertParallelResult) -> go.Figure:
    """Left: a heat map of the first MoE layer's prefill, a row per rank that sent tokens, a column per
    expert grouped by the rank holding it (a separator and the holder's colour between the groups),
    each cell the pairs that expert computed from that rank's tokens (measured; a cell off the
    diagonal blocks crossed between ranks); right: each decoder layer's prefill time on its slowest
    rank, compute, all-to-alls (labelled with their off-rank bytes) and all-gather, stacked (measured).

    Returns:
        A figure with `layout.meta == {"view": "lab-experts", "step": None}`.
    """
    r = result
    layer = r.moe_layers[0]
    layout, axes = subplot_grid([f"Layer {layer}'s prefill: pairs from each rank to each expert",
                                 "Each layer's prefill, slowest rank"],
                                cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.12)
    fig = go.Figure(layout=layout)
    _routing_map(fig, r, axes[(1, 1)])
    _layer_bars(fig, r, axes[(1, 2)])
    grid = r.measured(0, 0)
    pairs = sum(map(sum, grid))
    off = sum(n for source, row in enumerate(grid) for expert, n in enumerate(row) if expert // r.per_rank != source)
    prefill, comm = r.step_time(0)
    title = (f"Expert parallelism over {r.ranks} processes on {r.model_text()}: {r.per_rank} of "
             f"E = {r.dims['experts E']} experts a rank; in layer {layer}'s prefill {off} of {pairs} (token, expert) "
             f"pairs left their rank, {si_text(r.measured_bytes(0, 0), 'B')} an all-to-all (measured); "
             f"{comm / prefill:.0%} of the prefill in collectives; logits max |Δ| {r.max_abs_diff:.1g} against "
             f"one process, greedy tokens {'identical' if r.same_tokens else 'DIFFERENT'}")
    lab_frame(fig, "experts", title, 430, legend=True, left=90, bottom=80)
    return set_layout(fig, barmode="stack")


def _routing_map(fig: go.Figure, r: ExpertParallelResult, cell: dict) -> None:
    """The [source rank, expert] pairs as a heat map, the experts' columns grouped by holding rank."""
    grid, per = r.measured(0, 0), r.per_rank
    experts = [f"e{e}" for e in range(r.dims["experts E"])]
    senders = [f"from rank {s}" for s in range(r.ranks)]
    hover = [[f"{n} pairs of rank {s}'s tokens to expert {e} on rank {e // per} "
              f"({'stayed' if e // per == s else 'crossed'})" for e, n in enumerate(row)]
             for s, row in enumerate(grid)]
    fig.add_trace(go.Heatmap(z=grid, x=experts, y=senders, text=[[str(n) for n in row] for row in grid],
                             texttemplate="%{text}", customdata=hover, hovertemplate="%{customdata}<extra></extra>",
                             colorscale=COUNT_COLOURS, showscale=False, xgap=2, ygap=2, name="pairs", **cell))
    fig.layout[_axis(cell, "y")].update(autorange="reversed")
    fig.layout[_axis(cell, "x")].update(title={"text": "expert, grouped by the rank holding it", "standoff": 28})
    for q in range(r.ranks):  # each group of columns named and coloured by its rank, under the experts' ticks
        fig.add_annotation(x=(q + 0.5) * per - 0.5, y=0, xref=cell["xaxis"], yref=f"{cell['yaxis']} domain",
                           yanchor="top", yshift=-22, showarrow=False, font={"color": RANK_COLOURS[q % 8]},
                           text=f"<b>rank {q}</b> (pid {r.runs[q].pid})")
        if q:
            fig.add_vline(x=q * per - 0.5, line={"color": "#333333", "width": 2}, row=1, col=1)


def _layer_bars(fig: go.Figure, r: ExpertParallelResult, cell: dict) -> None:
    """Compute, all-to-alls and all-gather of each layer's prefill, ms, stacked; a dense layer has none."""
    times = r.layer_times(0)
    names = [f"layer {layer}" + ("" if layer in r.moe_layers else "<br>(dense)") for layer in range(r.layers)]
    sent = {layer: r.measured_bytes(0, moe) + r.measured_bytes(0, moe, "combine")
            for moe, layer in enumerate(r.moe_layers)}
    parts = (("compute", 0, PREFILL_COLOUR, lambda layer, ms: f"{ms:.1f} ms"),
             ("all-to-alls (ms, bytes sent off-rank)", 1, COMM_COLOUR,
              lambda layer, ms: f"{ms:.1f} ms<br>{si_text(sent[layer], 'B')}" if layer in sent else ""),
             ("all-gather", 2, GATHER_COLOUR, lambda layer, ms: f"{ms:.1f} ms" if layer in sent else ""))
    tallest = max(sum(t) for t in times)
    for name, index, colour, label in parts:  # a label only where it fits at a readable size (hover has all)
        text = [label(layer, t[index]) if t[index] >= LABEL_SHARE * tallest and r.layers <= MOST_LABELLED else ""
                for layer, t in enumerate(times)]
        fig.add_trace(go.Bar(x=names, y=[t[index] for t in times], name=name, marker_color=colour, text=text,
                             textposition="inside", textangle=0, insidetextanchor="middle",
                             hovertemplate=f"%{{x}}: {name} %{{y:.1f}} ms<extra></extra>", **cell))
    fig.layout[_axis(cell, "y")].update(title={"text": "ms (measured)"}, rangemode="tozero")


def _axis(cell: dict, letter: str) -> str:
    """The layout key of a cell's axis: {"xaxis": "x2"} -> "xaxis2"."""
    return letter + "axis" + cell[letter + "axis"][1:]
