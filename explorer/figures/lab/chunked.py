"""Chunked prefill's figure: the prompt's causal triangle with each chunk's [C, n] band coloured, beside
each chunk's wall time and its weight GEMMs' arithmetic intensity against the ridge point."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.theme import PREFILL_COLOUR, set_layout, subplot_grid
from explorer.lab.chunked import ChunkedPrefillResult, ChunkRecord, chunks_text
from explorer.lab.prefix import shape_text

# Okabe-Ito colours, cycled over the chunks (neighbours always differ)
BAND_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00")
LABELLED_BANDS = 12  # more chunks than this: their [C, n] in the hover only
RIDGE_COLOUR = "#555555"


def band_outline(start: int, tokens: int) -> tuple[list[float], list[float]]:
    """The outline of a chunk's band of the T x T causal triangle (x: key position, y: query
    position), cell edges: query row i covers keys 0..i, so the right edge is a staircase."""
    xs, ys = [0.0, start + 1.0], [float(start), float(start)]
    for row in range(start + 1, start + tokens):
        xs += [float(row), row + 1.0]
        ys += [float(row), float(row)]
    return xs + [float(start + tokens), 0.0, 0.0], ys + [float(start + tokens)] * 2 + [float(start)]


def _add_bands(fig: go.Figure, chunks: tuple[ChunkRecord, ...], cell: dict[str, str]) -> None:
    """The bands, one filled trace per colour (polygons separated by gaps), and a label or hover at
    each band's centre."""
    for colour_index, colour in enumerate(BAND_COLOURS):
        xs, ys = [], []
        for chunk in chunks[colour_index::len(BAND_COLOURS)]:
            band_xs, band_ys = band_outline(chunk.start, chunk.tokens)
            xs += band_xs + [None]
            ys += band_ys + [None]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", mode="lines", line={"width": 0.5, "color": colour},
                                     fillcolor=colour, opacity=0.75, showlegend=False, hoverinfo="skip", **cell))
    labels = [f"chunk {index}: [{chunk.tokens}, {chunk.context}]" for index, chunk in enumerate(chunks)]
    fig.add_trace(go.Scatter(
        x=[chunk.context / 2 for chunk in chunks], y=[chunk.start + chunk.tokens / 2 for chunk in chunks],
        mode="text" if len(chunks) <= LABELLED_BANDS else "markers", marker={"size": 6, "opacity": 0},
        text=[f"[{chunk.tokens}, {chunk.context}]" for chunk in chunks], hovertext=labels, hoverinfo="text",
        textfont={"size": 11, "color": "#000000"}, showlegend=False, **cell))


def fig_chunked(result: ChunkedPrefillResult) -> go.Figure:
    """Left: the T x T causal triangle (keys across, queries down), each chunk's [C, n] band of it in
    its own colour; right: each chunk's wall time (measured) and its weight GEMMs' arithmetic
    intensity (estimated), the latter against the ridge point (computed) and one prefill's. The title
    says whether the logits and greedy tokens agree.

    Returns:
        A figure with `layout.meta == {"view": "lab-chunked", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(
        [f"Each chunk's [C, n] band<br>of the {r.prompt_tokens} x {r.prompt_tokens} causal triangle",
         "Time per chunk, ms (measured)", f"Weight GEMMs' FLOP/byte (estimated, {r.dtype})"],
        rows=2, cols=2, specs=[[{"rowspan": 2}, {}], [None, {}]], column_widths=[0.5, 0.5],
        horizontal_spacing=0.1, vertical_spacing=0.2)
    edge = r.prompt_tokens
    layout["xaxis"].update(title={"text": "key position"}, range=[0, edge], constrain="domain")
    # both axes give up domain, not range, to keep the cells square: the triangle fills its axes
    layout["yaxis"].update(title={"text": "query position"}, range=[edge, 0], scaleanchor="x", constrain="domain")
    top = max(r.ridge_flops_per_byte, r.full_cost.gemm_intensity) * 2
    layout["yaxis3"].update(type="log", dtick=1, range=[math.log10(0.5), math.log10(top)])
    layout["xaxis3"].update(title={"text": "chunk"})
    # room above the tallest time bar for its label, under the subplot's title
    layout["yaxis2"].update(range=[0, 1.25 * max(chunk.ms for chunk in r.chunks)])
    fig = go.Figure(layout=layout)
    _add_bands(fig, r.chunks, axes[(1, 1)])
    index = list(range(len(r.chunks)))
    hover = [f"chunk {i}: input {shape_text(chunk.input_shape)}, cache n = {chunk.context}" for i, chunk in
             enumerate(r.chunks)]
    labelled = len(r.chunks) <= LABELLED_BANDS
    for row, values, digits in ((1, [chunk.ms for chunk in r.chunks], 0),
                                (2, [chunk.cost.gemm_intensity for chunk in r.chunks], 1)):
        fig.add_trace(go.Bar(x=index, y=values, hovertext=hover, showlegend=False, cliponaxis=False,
                             text=[f"{value:.{digits}f}" for value in values] if labelled else None,
                             textposition="outside", marker_color=PREFILL_COLOUR if row == 1 else
                             [BAND_COLOURS[i % len(BAND_COLOURS)] for i in index], **axes[(row, 2)]))
    for level, label, dash in ((r.ridge_flops_per_byte, f"ridge point of the {r.ridge_hardware}: "
                                f"{r.ridge_flops_per_byte:.0f} FLOP/byte in {r.dtype} (computed)", "dash"),
                               (r.full_cost.gemm_intensity, f"one prefill of all {r.prompt_tokens} tokens: "
                                f"{r.full_cost.gemm_intensity:.0f} FLOP/byte (estimated)", "dot")):
        fig.add_trace(go.Scatter(x=[-0.5, len(r.chunks) - 0.5], y=[level] * 2, mode="lines", name=label,
                                 line={"color": RIDGE_COLOUR, "dash": dash}, **axes[(2, 2)]))
    title = (f"Chunked prefill: {r.prompt_tokens} tokens in {chunks_text(len(r.chunks))} of C = {r.chunk_size}, "
             f"{r.chunked_ms:.0f} ms against {r.full_ms:.0f} ms in one prefill; weight GEMMs at "
             f"{r.chunks[0].cost.gemm_intensity:.0f} FLOP/byte<br>logits max |Δ| {r.max_abs_diff:.1g} against one "
             f"prefill, greedy tokens {'identical' if r.same_tokens else 'DIFFER'}")
    lab_frame(fig, "chunked", title, 560, subplot_title_lines=2, left=70, bottom=110)
    # at the figure's foot, across its width: a legend that ran past the right edge would push plotly's right
    # margin out and squeeze every subplot
    return set_layout(fig, legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 4, "yanchor": "bottom",
                                   "yref": "container"})
