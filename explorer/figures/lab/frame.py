"""The look every lab figure shares: its title wrapped into lines that fit the Lab's plot, then its
legend, then the subplots' titles, each in a band of its own at the top (measured in pixels, so none
runs over another), and `layout.meta` naming the experiment."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from explorer.figures.theme import (
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
    segments = [piece for part in title.split("<br>") for piece in re.split(r"(?<=[;,:]) ", part)]
    # a piece longer than a line breaks between its words
    segments = [word for piece in segments for word in ([piece] if len(piece) <= TITLE_CHARS else piece.split(" "))]
    lines = wrapped(segments, TITLE_CHARS)
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
