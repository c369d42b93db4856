"""The look every lab figure shares: its title wrapped into lines that fit the Lab's plot, then its
legend, then the subplots' titles, each in a band of its own at the top (measured in pixels, so none
runs over another), and `layout.meta` naming the experiment."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from explorer.figures.theme import (
    PRESENTER_SCALE,
    TITLE_ASCENT_PX,
    TITLE_FONT_SIZE,
    TITLE_LINE_PX,
    TITLE_TOP_PX,
    base_layout,
    set_layout,
    wrapped,
)

TITLE_CHARS = 105  # a 17 px title line across the Lab's plot (about 900 px wide at 1280x720)
LEGEND_PX = 26  # one horizontal legend row
SUBPLOT_TITLE_LINE_PX = 20


def lab_frame(fig: go.Figure, name: str, title: str, height: int, *, legend: bool = False,
              subplot_title_lines: int = 1, left: int = 80, right: int = 30, bottom: int = 50) -> go.Figure:
    """Style `fig` as the lab's experiment `name`, in place, and return it.

    Args:
        title: the title, wrapped into lines of `TITLE_CHARS` after its punctuation (";", ",", ":"),
            between words where a piece is longer than a line, and at its "<br>"s.
        height: the figure's height in pixels, the bands at the top included.
        legend: a horizontal legend in a band under the title.
        subplot_title_lines: lines of the tallest subplot title (0: none), in a band above the plots.
        left, right, bottom: the other margins, in pixels.

    Returns:
        `fig`, with `layout.meta == {"view": "lab-<name>", "step": None}`.
    """
    lines = title_lines(title, TITLE_CHARS)
    title_px = TITLE_TOP_PX + TITLE_LINE_PX * len(lines) + 4
    top = title_px + (LEGEND_PX if legend else 0) + SUBPLOT_TITLE_LINE_PX * subplot_title_lines + 10
    base_layout(fig, f"lab-{name}", None, "<br>".join(lines), height=height)
    # plotly places a title's first baseline at y: the first line's ascent below the figure's top edge
    set_layout(fig, title={"text": "<br>".join(lines), "x": 0.01, "xanchor": "left", "yanchor": "top",
                           "y": 1 - (TITLE_TOP_PX + TITLE_ASCENT_PX) / height, "yref": "container",
                           "font": {"size": TITLE_FONT_SIZE}},
               margin={"l": left, "r": right, "t": top, "b": bottom})
    if legend:
        set_layout(fig, legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1 - (title_px + 2) / height,
                                "yanchor": "top", "yref": "container"})
    return fig


def title_lines(title: str, chars: int) -> list[str]:
    """`title` in lines of at most `chars` characters: broken after its punctuation (";", ",", ":"),
    between words where a piece is longer than a line, and at its "<br>"s. A "<br>" is a break between
    clauses: where the wrapping puts both on one line, a ";" stays between them (a part that ends in
    punctuation keeps its own)."""
    parts = title.split("<br>")
    parts = [part if i == len(parts) - 1 or part.rstrip()[-1:] in ";,:." else part.rstrip() + ";"
             for i, part in enumerate(parts)]
    segments = [piece for part in parts for piece in re.split(r"(?<=[;,:]) ", part)]
    # a piece longer than a line breaks between its words
    segments = [word for piece in segments for word in ([piece] if len(piece) <= chars else piece.split(" "))]
    return wrapped(segments, chars)


def presenter_frame(fig: go.Figure) -> go.Figure:
    """A lab figure made ready, in place, for `presenter_style` (text `PRESENTER_SCALE` times larger,
    every band and margin with it): its title wrapped again into the fewer characters a line then
    holds, the bands below the title moved down by the lines and the legend rows that adds (a
    legend's row holds its names' characters in the plot's width), and a slider's text as much
    larger. Returns `fig`."""
    layout = fig.layout
    old = layout.title.text.split("<br>")
    chars = int(TITLE_CHARS / PRESENTER_SCALE)
    lines = title_lines(" ".join(old), chars)
    legend_chars = sum(len(trace.name or "") + 6 for trace in fig.data if trace.showlegend is not False and trace.name)
    extra_rows = -(-legend_chars // chars) - 1 if layout.legend.orientation == "h" and legend_chars else 0
    added_px = TITLE_LINE_PX * (len(lines) - len(old)) + LEGEND_PX * max(0, extra_rows)
    height = layout.height + added_px
    fig.update_layout(height=height, margin={"t": layout.margin.t + added_px},  # merged into what is set
                      title={"text": "<br>".join(lines), "y": 1 - (TITLE_TOP_PX + TITLE_ASCENT_PX) / height})
    if layout.legend.orientation == "h":
        fig.update_layout(legend={"y": 1 - (TITLE_TOP_PX + TITLE_LINE_PX * len(lines) + 6) / height})
    for slider in layout.sliders:  # presenter_style leaves sliders as they are
        slider.font.size = round(slider.font.size * PRESENTER_SCALE)
        slider.currentvalue.font.size = round(slider.currentvalue.font.size * PRESENTER_SCALE)
    return fig
