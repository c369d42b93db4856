"""Pipeline parallelism's figure: GPipe's timeline as it ran (a Gantt chart: one row per stage, one bar
per micro-batch's compute, the idle time between them in grey) beside the bubble measured against
GPipe's formula."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.lab.tensor import RANK_COLOURS
from explorer.figures.theme import set_layout, si_text, subplot_grid
from explorer.lab.pipeline import PipelineResult, fraction_text, layers_text
from explorer.lab.prefix import shape_text

IDLE_COLOUR = "#E5E5E5"
FORMULA_COLOUR = "#999999"
MEASURED_COLOUR = "#D55E00"


def fig_pipeline(result: PipelineResult) -> go.Figure:
    """Left: one row per stage (its layers), a grey bar over the whole pass (idle) under one bar per
    micro-batch from its compute's start to its end (measured, ms since the pass began), coloured and
    labelled by micro-batch; right: the bubble, the idle share of the grid, measured against GPipe's
    (S - 1)/(M + S - 1) (computed). The title gives both, the sends and the logits' agreement.

    Returns:
        A figure with `layout.meta == {"view": "lab-pipeline", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(["Each stage's compute of each micro-batch (measured; grey: idle)",
                                 "Bubble: idle share"], cols=2, column_widths=[0.78, 0.22], horizontal_spacing=0.1)
    rows = [_row(run) for run in r.runs]
    layout["yaxis"].update(autorange="reversed", categoryorder="array", categoryarray=rows)
    layout["xaxis"].update(title={"text": "ms since the pass began"}, range=[0, r.makespan_ms * 1.01])
    layout["yaxis2"].update(range=[0, 115], ticksuffix="%")
    fig = go.Figure(layout=layout)
    _timeline(fig, r, rows, axes[(1, 1)])
    _bubble_bars(fig, r, axes[(1, 2)])
    sent = (f"{len(r.sends)} sends of {si_text(r.sends[0].payload_bytes, 'B')} ({shape_text(r.sends[0].shape)} "
            "activations)" if r.sends else "no sends (one stage)")
    processes = f"{r.stages} processes" if r.stages > 1 else "one process"
    title = (f"Pipeline parallelism over {processes}, {r.microbatches} micro-batches (GPipe): bubble "
             f"{r.bubble:.0%} measured, GPipe's (S - 1)/(M + S - 1) = {float(r.formula_bubble):.0%} computed; {sent}; "
             f"logits max |Δ| {r.max_abs_diff:.1g} against one process, next token "
             f"{'identical' if r.same_token else 'DIFFERENT'}")
    lab_frame(fig, "pipeline", title, 430, left=110, bottom=50)
    return set_layout(fig, barmode="overlay", showlegend=False,  # every bar placed by its base
                      uniformtext={"minsize": 10, "mode": "hide"})  # a label too narrow to read is left off


def _row(run) -> str:
    return f"stage {run.stage}<br>{layers_text(run.layers)}"


def _timeline(fig: go.Figure, r: PipelineResult, rows: list[str], cell: dict) -> None:
    """The idle background of every stage, then one trace per micro-batch: its slot on each stage."""
    fig.add_trace(go.Bar(y=rows, x=[r.makespan_ms] * len(rows), base=[0] * len(rows), orientation="h",
                         name="idle", marker_color=IDLE_COLOUR, hoverinfo="skip", **cell))
    for micro in range(r.microbatches):
        slots = [next(slot for slot in run.slots if slot.micro == micro) for run in r.runs]
        fig.add_trace(go.Bar(y=rows, x=[slot.ms for slot in slots], base=[slot.start_ms for slot in slots],
                             orientation="h", name=f"micro-batch {micro}", marker_color=RANK_COLOURS[micro % 8],
                             text=[f"m{micro}"] * len(slots), textposition="inside", insidetextanchor="middle",
                             textangle=0, hovertext=[f"{slot.start_ms:.1f}-{slot.end_ms:.1f} ms" for slot in slots],
                             hoverinfo="y+name+text", **cell))


def _bubble_bars(fig: go.Figure, r: PipelineResult, cell: dict) -> None:
    """The measured bubble beside GPipe's formula, in % of the stage-time grid."""
    values = [100 * r.bubble, 100 * float(r.formula_bubble)]
    fig.add_trace(go.Bar(x=["measured", "GPipe"], y=values, marker_color=[MEASURED_COLOUR, FORMULA_COLOUR],
                         text=[f"{values[0]:.0f}%", f"{fraction_text(r.formula_bubble)}<br>{values[1]:.0f}%"],
                         textposition="outside", cliponaxis=False,
                         name="bubble", **cell))
