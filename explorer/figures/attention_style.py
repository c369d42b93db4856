"""The attention figure's dressing: the bent colour scale (colour = p ** `GAMMA`) and the colour bar
that reads it in probabilities, the panels' token ticks and axis titles, and the outlines of the
newest query rows. The heatmaps themselves are `explorer.figures.attention`'s.
"""

from __future__ import annotations

import functools

import numpy as np
from plotly.colors import sample_colorscale

from explorer.figures.attention_labels import PanelGeometry, fitted_ticks
from explorer.figures.theme import HIGHLIGHT_COLOUR, axis_key

MASKED_COLOUR = "#e8e8e8"  # behind NaN cells: the masked (future) keys
GAMMA = 0.3  # colour = p ** GAMMA: p = 0.001 sits at 13% of the colour scale, 0.01 at 25%, 0.1 at 50%
COLOUR_TICKS = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0)  # the colour bar's labels, in probabilities
BASE_SCALE = "Blues"  # the colour scale that p ** GAMMA runs along
COLOUR_STOPS = 65  # stops of the bent scale: within 2/255 of Blues(p ** GAMMA) everywhere
X_TITLE = "key (source) token: the one attended to"
Y_TITLE = "query (destination) token:<br>the one attending"


def power_colorscale(gamma: float = GAMMA, base: str = BASE_SCALE, stops: int = COLOUR_STOPS) -> list[list]:
    """A Plotly colour scale over p in 0..1 whose colour at p is `base`'s colour at p ** gamma: stops
    at u ** (1 / gamma) for u evenly spaced in 0..1 (plotly.js interpolates linearly between them),
    as [[p, "#rrggbb"], ...]."""
    return [list(stop) for stop in _power_stops(gamma, base, stops)]


@functools.cache
def _power_stops(gamma: float, base: str, stops: int) -> tuple[tuple[float, str], ...]:
    u = np.linspace(0.0, 1.0, stops)
    colours = sample_colorscale(base, u.tolist(), colortype="tuple")
    return tuple((float(p), "#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in colour)))
                 for p, colour in zip(u ** (1.0 / gamma), colours, strict=True))


def colour_bar_carrier(cell: dict[str, str]) -> dict:
    """A scatter with no point to draw, whose marker colour axis ("coloraxis2") draws the colour bar:
    the base scale evenly, labelled in probabilities where p ** GAMMA falls."""
    return {"type": "scatter", "x": [None], "y": [None], "mode": "markers", "hoverinfo": "skip",
            "showlegend": False, "marker": {"color": [0.0], "coloraxis": "coloraxis2"}, **cell}


def row_outlines(panel_cells: list[dict[str, str]], first: int, stop: int, n_keys: int) -> list[dict]:
    """Rectangles around query rows first..stop-1 (category positions), one per panel."""
    return [{"type": "rect", "xref": cell["xaxis"], "yref": cell["yaxis"], "x0": -0.5, "x1": n_keys - 0.5,
             "y0": first - 0.5, "y1": stop - 0.5, "line": {"color": HIGHLIGHT_COLOUR, "width": 2},
             "fillcolor": "rgba(0,0,0,0)", "name": "newest rows"} for cell in panel_cells]


def style_axes(layout: dict, cells: dict[tuple[int, int], dict[str, str]], keys: list[tuple[str, str]],
           queries: list[tuple[str, str]], grid_rows: int, columns: int, geometry: PanelGeometry, scale: float,
           outside_column: bool) -> None:
    """Token ticks on the outer axes only (the inner ones share them), each cell labelled where the
    labels fit; the axis titles; the bent colour axis and the colour bar's."""
    key_ticks, key_font = fitted_ticks(len(keys), geometry.drawn_panel_w(scale), scale)
    query_ticks, query_font = fitted_ticks(len(queries), geometry.panel_h)
    for (row, col), cell in cells.items():
        x_axis, y_axis = layout[axis_key(cell["xaxis"])], layout[axis_key(cell["yaxis"])]
        x_axis.update(showgrid=False, tickfont={"size": key_font}, tickangle=-90)
        y_axis.update(showgrid=False, tickfont={"size": query_font}, autorange="reversed")
        if row == grid_rows:  # the axis the column's other panels match
            if outside_column:  # drawn after the matrix, shown before it
                x_axis.update(categoryorder="array", categoryarray=[k for k, _ in keys])
            x_axis.update(tickmode="array", tickvals=[keys[i][0] for i in key_ticks],
                          ticktext=[keys[i][1] for i in key_ticks])
        if col == 1:
            y_axis.update(tickmode="array", tickvals=[queries[i][0] for i in query_ticks],
                          ticktext=[queries[i][1] for i in query_ticks])
    layout[axis_key(cells[grid_rows, (columns + 1) // 2]["xaxis"])]["title"] = {"text": X_TITLE}
    layout[axis_key(cells[(grid_rows + 1) // 2, 1]["yaxis"])]["title"] = {"text": Y_TITLE}
    for note in layout["annotations"]:
        note["font"] = {"size": 12}
    bar_title = f"probability<br>colour: p^{GAMMA:g}<br>so small weights show"
    layout.update(coloraxis={"colorscale": power_colorscale(), "cmin": 0.0, "cmax": 1.0, "showscale": False},
                  coloraxis2={"colorscale": BASE_SCALE, "cmin": 0.0, "cmax": 1.0, "colorbar": {
                      "title": {"text": bar_title, "side": "right"}, "thickness": 14,
                      "tickvals": [t ** GAMMA for t in COLOUR_TICKS], "ticktext": [f"{t:g}" for t in COLOUR_TICKS]}},
                  plot_bgcolor=MASKED_COLOUR)
