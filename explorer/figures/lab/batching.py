"""Continuous batching's figure: each request's state at each engine step, each step's tokens packed
against padded, and the page table at the step whose pages hold the most."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.theme import DECODE_COLOUR, PREFILL_COLOUR, set_layout, si_text, subplot_grid
from explorer.lab.batching import PHASES, BatchingResult

PHASE_COLOURS = {"waiting": "#E5E5E5", "prefill": PREFILL_COLOUR, "decode": DECODE_COLOUR, "done": "#8C8C8C"}
PAGE_COLOUR = "#009E73"  # a page a request holds
FREE_COLOUR = "#F2F2F2"
PACKED_COLOUR = "#CC79A7"  # the packed layout's bars: a colour no phase of the timeline has
PADDED_COLOUR = "#F0E442"  # yellow: apart from every phase's colour (grey is "done")
LABEL_ROOM = 1.25  # an axis's top over its tallest bar: room for the bar's label under the subplot's title


def fig_batching(result: BatchingResult) -> go.Figure:
    """Top: requests x engine steps, coloured by phase, with each one's tokens in; bottom left: each
    step's tokens in, packed ([num_tokens, d], measured) and padded ([B, T_max, d], computed); bottom
    right: the physical pages at the peak step, one row per request (text: the logical block a page
    holds) and a row of free pages. The title says whether the tokens and logits agree.

    Returns:
        A figure with `layout.meta == {"view": "lab-batching", "step": None}`.
    """
    r = result
    peak = r.memory[r.peak_step]
    layout, axes = subplot_grid(
        ["Each request at each engine step (tokens in)",
         "Tokens in per step: packed vs padded",
         f"Page table at step {r.peak_step} ({r.block_size} positions a page; computed)"],
        rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]], vertical_spacing=0.2, horizontal_spacing=0.1,
        row_heights=[0.45, 0.55])
    layout["xaxis"].update(title={"text": "engine step"}, dtick=1)
    layout["yaxis"].update(autorange="reversed")
    layout["xaxis2"].update(title={"text": "engine step"}, dtick=1)
    layout["yaxis2"].update(title={"text": "tokens"})
    layout["xaxis3"].update(title={"text": "physical page"}, dtick=1 if r.tables[-1].pages_total <= 24 else None)
    layout["yaxis3"].update(autorange="reversed")
    fig = go.Figure(layout=layout)
    _timeline(fig, r, axes[(1, 1)])
    steps = [layout.step for layout in r.layouts]
    for name, colour, values in (
            ("packed [num_tokens, d] (measured)", PACKED_COLOUR, [shape[1] for shape in r.packed_shapes]),
            ("padded [B, T_max, d] (computed)", PADDED_COLOUR, [layout.padded_tokens for layout in r.layouts])):
        fig.add_trace(go.Bar(x=steps, y=values, name=name, marker_color=colour, text=values, textposition="outside",
                             cliponaxis=False, **axes[(2, 1)]))
    tallest = max(max(layout.padded_tokens for layout in r.layouts), *(shape[1] for shape in r.packed_shapes))
    fig.layout.yaxis2.range = [0, LABEL_ROOM * tallest]
    _pages(fig, r, axes[(2, 2)])
    title = (f"Continuous batching: {len(r.requests)} requests in {len(r.layouts)} steps; greedy tokens "
             f"{'identical to each run alone' if r.same_tokens else 'DIFFER from alone'}, logits max |Δ| "
             f"{r.max_abs_diff:.1g}<br>{r.tokens_per_s(True):.1f} tokens/s batched vs {r.tokens_per_s(False):.1f} "
             f"one after another (measured); KV at step {r.peak_step}: pages "
             f"{si_text(peak.paged_positions * r.bytes_per_position, 'B')}, padded "
             f"{si_text(peak.padded_positions * r.bytes_per_position, 'B')} (computed)")
    lab_frame(fig, "batching", title, 560, legend=True, left=90)
    return set_layout(fig, barmode="group")


def _timeline(fig: go.Figure, r: BatchingResult, axes: dict) -> None:
    """Requests x steps heatmap: z the phase's index in `PHASES` on a stepped colour scale."""
    steps = range(len(r.layouts))
    z = [[PHASES.index(request.phase(step)) for step in steps] for request in r.requests]
    text = [["" if request.phase(step) in ("waiting", "done") else
             (str(request.prompt_tokens) if request.phase(step) == "prefill" else "1") for step in steps]
            for request in r.requests]
    scale = []
    for i, phase in enumerate(PHASES):
        scale += [[i / len(PHASES), PHASE_COLOURS[phase]], [(i + 1) / len(PHASES), PHASE_COLOURS[phase]]]
    fig.add_trace(go.Heatmap(
        z=z, x=list(steps), y=[f"request {i}" for i in range(len(r.requests))], text=text, texttemplate="%{text}",
        colorscale=scale, zmin=-0.5, zmax=len(PHASES) - 0.5, showscale=False, xgap=2, ygap=2,
        customdata=[[request.phase(step) for step in steps] for request in r.requests],
        hovertemplate="%{y}, step %{x}: %{customdata}<extra></extra>", **axes))
    for phase in PHASES:  # legend entries for the phases
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=phase, hoverinfo="skip",
                                 marker={"color": PHASE_COLOURS[phase], "symbol": "square", "size": 12}, **axes))


def _pages(fig: go.Figure, r: BatchingResult, axes: dict) -> None:
    """Rows: each live request's pages (text: the logical block j it holds there), then the free pages."""
    table = r.tables[r.peak_step]
    pages = range(table.pages_total)
    held = {page for entries in table.block_tables.values() for page in entries}
    rows = [f"request {request}" for request in table.block_tables] + ["free"]
    z, text = [], []
    for entries in table.block_tables.values():
        z.append([1 if page in entries else None for page in pages])
        text.append([f"b{entries.index(page)}" if page in entries else "" for page in pages])
    z.append([0 if page not in held else None for page in pages])
    text.append(["" for _ in pages])
    fig.add_trace(go.Heatmap(
        z=z, x=list(pages), y=rows, text=text, texttemplate="%{text}", zmin=0, zmax=1, showscale=False,
        colorscale=[[0, FREE_COLOUR], [1, PAGE_COLOUR]], xgap=2, ygap=2,
        hovertemplate="%{y}, physical page %{x}: %{text}<extra></extra>", **axes))
