"""Tensor parallelism's figure: what each rank holds of layer 0 at every stop (its slice of the heads
and MLP columns, or the whole residual), and each step's time in collectives against its compute."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.theme import PREFILL_COLOUR, set_layout, si_text, subplot_grid
from explorer.lab.prefix import shape_text
from explorer.lab.tensor import STOPS, TensorParallelResult

RANK_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
WHOLE_COLOUR = "#BBBBBB"  # a stop every rank holds whole (the residual stream, replicated)
COMM_COLOUR = "#D55E00"


def fig_tensor(result: TensorParallelResult) -> go.Figure:
    """Left: one row per stop of layer 0 (prefill), its last dimension drawn as the full width: a split
    stop as R segments, rank r's slice coloured and labelled with its measured local shape, a
    replicated stop as one grey bar (every rank holds it whole); right: the prefill's and a decode
    step's time on the slowest rank, compute against collectives, as % of the step (measured), with
    the all-reduces' bytes (measured). The title says whether the logits and greedy tokens agree.

    Returns:
        A figure with `layout.meta == {"view": "lab-tensor", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(["Layer 0 on each rank, prefill: its slice of every stop (measured shapes)",
                                 "Time of a step (slowest rank)"], cols=2, column_widths=[0.7, 0.3],
                                horizontal_spacing=0.2)
    stops = [name for _, _, name, _ in STOPS]
    layout["yaxis"].update(autorange="reversed", categoryorder="array", categoryarray=stops)
    layout["xaxis"].update(title={"text": "the stop's last dimension, whole = 100%"}, range=[0, 100], ticksuffix="%")
    layout["yaxis2"].update(range=[0, 115], ticksuffix="%")
    fig = go.Figure(layout=layout)
    _shape_bars(fig, r, axes[(1, 1)])
    _time_bars(fig, r, axes[(1, 2)])
    step, step_comm = r.decode_ms()
    title = (f"Tensor parallelism over {r.ranks} processes: {r.counts(0).get('all_reduce', 0)} all-reduces a step "
             f"(2 a layer, 1 after the embedding) and an all-gather of the logits, {step_comm / step:.0%} of a decode "
             f"step in collectives (measured); logits max |Δ| "
             f"{r.max_abs_diff:.1g} against one process, greedy tokens {'identical' if r.same_tokens else 'DIFFERENT'}")
    lab_frame(fig, "tensor", title, 430, legend=True, left=190, bottom=50)
    return set_layout(fig, barmode="overlay")  # every bar placed by its base


def _shape_bars(fig: go.Figure, r: TensorParallelResult, cell: dict) -> None:
    """Each rank's slice of the split stops side by side; the replicated stops whole, in grey."""
    split = [name for _, _, name, is_split in STOPS if is_split]
    whole = [name for _, _, name, is_split in STOPS if not is_split]
    share = 100 / r.ranks
    for run in r.runs:
        shapes = dict(run.stops)
        fig.add_trace(go.Bar(y=split, x=[share] * len(split), base=[run.rank * share] * len(split), orientation="h",
                             name=f"rank {run.rank} (pid {run.pid})", marker_color=RANK_COLOURS[run.rank % 8],
                             text=[shape_text(shapes[name]) for name in split], textposition="inside",
                             insidetextanchor="middle", hoverinfo="y+text+name", **cell))
    shapes = dict(r.runs[0].stops)
    fig.add_trace(go.Bar(y=whole, x=[100] * len(whole), orientation="h", name="whole on every rank",
                         marker_color=WHOLE_COLOUR, text=[shape_text(shapes[name]) for name in whole],
                         textposition="inside", insidetextanchor="middle", hoverinfo="y+text", **cell))


def _time_bars(fig: go.Figure, r: TensorParallelResult, cell: dict) -> None:
    """Compute and collectives as shares of the prefill and of a decode step, ms and rank 0's bytes (every
    collective's) as text."""
    steps = [("prefill", *r.prefill_ms(), r.sent_bytes(0))]
    if len(r.runs[0].steps) > 1:
        steps.append(("decode step", *r.decode_ms(), r.sent_bytes(1)))
    names = [f"{name}<br>{ms:.0f} ms" for name, ms, *_ in steps]
    compute = [100 * (ms - comm) / ms for _, ms, comm, _ in steps]
    comm = [100 * comm / ms for _, ms, comm, _ in steps]
    fig.add_trace(go.Bar(x=names, y=compute, name="compute", marker_color=PREFILL_COLOUR, showlegend=False,
                         text=[f"compute<br>{ms - c:.0f} ms" for _, ms, c, _ in steps], textposition="inside", textangle=0,
                         insidetextanchor="middle", **cell))
    fig.add_trace(go.Bar(x=names, y=comm, base=compute, name="collectives", marker_color=COMM_COLOUR, showlegend=False,
                         text=[f"collectives<br>{c:.0f} ms<br>{si_text(b, 'B')}" for _, _, c, b in steps],
                         textposition="inside", textangle=0, insidetextanchor="middle", **cell))
