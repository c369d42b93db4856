"""The attention view's words and their room: token labels per cell, how many ticks fit a panel, the
title and hovers, and the panels' geometry (margins that hold the labels, panels that fit a screen).

Pure text and arithmetic (no plotly). A cell of the attention matrix is one token, or, where a long
matrix is pooled, a block of tokens; a block is named by its token range ("#30–59 (30 tokens)"),
a token by its position and piece ("#4 ␣is"). Whether every tick label fits is computed from the
panel's size in pixels and the tick font (`fitted_ticks`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from explorer.figures.dims import coloured
from explorer.figures.theme import (
    TITLE_CHARS,
    TITLE_LINE_PX,
    TITLE_TOP_PX,
    plain_label,
    visible_piece,
    visible_text,
    wrapped,
)

MAX_PIECE_CHARS = 12
TICK_FONT_PX = 10  # the token labels' font, shrunk to TICK_FONT_MIN_PX where that makes every label fit
TICK_FONT_MIN_PX = 9
CHAR_WIDTH = 0.62  # a label character's width, in font sizes (Inter / Helvetica, "␣" included; judgement)
MAX_TICKS = 60  # labels per axis at most, however large the panel
FIGURE_WIDTH_PX = 1260  # the width the figure is drawn at on a 1280 px screen (the layout's geometry)
MAX_HEIGHT_PX = 640  # the figure at normal size, up to three grid rows of panels (9 heads): a 1280x720 screen
COLOURBAR_PX = 120  # the right margin: the colour bar, its labels and its title
H_SPACING = 0.02  # between panel columns, a fraction of the plot width
GAP_PX = 30  # between grid rows: the next row's panel titles
TITLE_PAD_PX = 26  # between the title's last line and the panels: the first row's panel titles


def block_labels(pieces: list[str], starts: np.ndarray, stop: int) -> list[tuple[str, str]]:
    """(category, tick text) of each block of token positions: blocks start at `starts` (ascending
    absolute positions), the last one ends before `stop`.

    A one-token block is "#a piece" with the tick "piece" where no block of the axis is longer, else
    "a piece"; a longer block is "#a–b (k tokens)" with the tick "a–b". The category (unique along
    an axis) shows in the hover; pieces are escaped for Plotly.

    Args:
        pieces: the token pieces, indexed by absolute position (at least `stop` of them).
        starts: [blocks] int, the first position of each block.
        stop: one past the last block's last position.

    Raises:
        ValueError: `starts` empty, not ascending or outside 0..stop-1, or `pieces` shorter than `stop`.
    """
    bounds = [*np.asarray(starts).tolist(), stop]
    if len(bounds) < 2 or any(b <= a for a, b in pairwise(bounds)) or bounds[0] < 0 or len(pieces) < stop:
        raise ValueError(f"Blocks must start at ascending positions below {stop} of {len(pieces)} pieces, got {starts}.")
    pooled = any(b - a > 1 for a, b in pairwise(bounds))
    labels = []
    for a, b in pairwise(bounds):
        if b - a == 1:
            piece = plain_label(visible_piece(pieces[a], MAX_PIECE_CHARS))
            labels.append((f"#{a} {piece}", f"{a} {piece}" if pooled else piece))
        else:
            labels.append((f"#{a}–{b - 1} ({b - a} tokens)", f"{a}–{b - 1}"))
    return labels


def thinned_ticks(count: int, max_ticks: int) -> list[int]:
    """At most `max_ticks` (>= 2) evenly spaced indices of `count` labels, always keeping the first
    and the last (the newest)."""
    if count <= max_ticks:
        return list(range(count))
    stride = math.ceil((count - 1) / (max(max_ticks, 2) - 1))
    ticks = list(range(0, count, stride))
    if count - 1 - ticks[-1] < stride:  # too close to the last label to stay legible
        ticks.pop()
    return [*ticks, count - 1]


def fitted_ticks(count: int, panel_px: float, scale: float = 1.0) -> tuple[list[int], int]:
    """Which of `count` equal cells along `panel_px` pixels get a tick label, and the label font.

    Every cell is labelled where its pitch (`panel_px / count`) holds a line of `TICK_FONT_PX` text
    (one pixel between lines), or of `TICK_FONT_MIN_PX`; else as many as fit at `TICK_FONT_PX`,
    evenly spaced (`thinned_ticks`), and never more than `MAX_TICKS`.

    Args:
        count: the cells along the axis (tokens or pooled blocks).
        panel_px: the panel's length along the axis, in pixels, as drawn.
        scale: the text's scale when drawn (presenter mode enlarges the fonts, not always the panel).

    Returns:
        (indices of the labelled cells, ascending; the font size in px before `scale`).
    """
    pitch = panel_px / max(count, 1)
    for font in (TICK_FONT_PX, TICK_FONT_MIN_PX):
        if pitch >= (font + 1) * scale and count <= MAX_TICKS:
            return list(range(count)), font
    fit = int(panel_px // ((TICK_FONT_PX + 1) * scale))
    return thinned_ticks(count, max(2, min(fit, MAX_TICKS))), TICK_FONT_PX


def text_px(texts: list[str], font_px: float) -> float:
    """The drawn width of the longest of `texts` (Plotly labels: tags dropped, entities decoded)."""
    return max((len(visible_text(t)) for t in texts), default=0) * CHAR_WIDTH * font_px


def step_name(step: int) -> str:
    return "the prefill" if step == 0 else f"decode step {step}"


def lesson_segments(layer: int, step: int) -> list[str]:
    """The title's first sentence, in segments that `wrapped` keeps whole."""
    return [f"Attention in layer {layer} at {step_name(step)}:", "each row is a query token,",
            "how its weight spreads over the key tokens it may see", "(causal: none to the right)"]


def window_segments(outside: np.ndarray, last_row: str, newest: bool, first_key: int, average: bool) -> list[str]:
    """The zoom window's share of its last row's weight, in title segments.

    Args:
        outside: [panels] float32, the weight the window's last query row puts on keys outside the
            window, per panel (query head, or the one mean panel).
        last_row: that row's category ("#57 ␣is").
        newest: that row is the newest token of the context.
        first_key: the window's first key position (keys 0..first_key-1 lie before it).
        average: the one panel is the mean over heads.
    """
    which = "the newest row" if newest else "its last row"
    if first_key == 0:
        return [f"The window starts at token 0: it holds all of {which}'s ({last_row}) weight."]
    share = float(np.mean(outside))
    spread = (f" (mean of {len(outside)} heads; per head {float(outside.min()):.1%}–{float(outside.max()):.1%})"
              if len(outside) > 1 else " (mean over heads)" if average else "")
    return [f"The window holds {1 - share:.1%} of {which}'s ({last_row}) weight;",
            f"{share:.1%} lies on keys 0–{first_key - 1} before it{spread}."]


def figure_title(layer: int, step: int, heads: int, n_kv_heads: int, average: bool, factor: int, own: int,
                 window: tuple[int, int] | None, outside: np.ndarray | None, last_row: str, n: int,
                 scale: float = 1.0, note: Sequence[str] = ()) -> str:
    """The attention figure's title: what it shows, `note`, the zoom window's share of weight, then the
    heads and the resolution, wrapped into lines that fit the figure's width at text scale `scale`.

    Args:
        layer, step: the layer and step shown (0 = the prefill).
        heads, n_kv_heads: h_q and h_kv.
        average: one panel, the mean over the query heads.
        factor: tokens per pooled cell side (1: not pooled).
        own: the newest rows drawn as a block of their own (0: none shown).
        window: (start, stop) token positions of a zoom window, or None.
        outside: with `window`: [panels] float32, the weight the window's last row puts outside it.
        last_row: the last shown query row's category.
        n: the context length.
        scale: the text's scale when drawn (presenter mode).
        note: segments on lines of their own after the first sentence (e.g. the attention sinks).
    """
    width = int(TITLE_CHARS / scale)
    what = ([f"mean over the {coloured('h_q')} = {heads} query heads"] if average else
            [f"{coloured('h_q')} = {heads} query heads,",
             f"{coloured('h_kv')} = {n_kv_heads} KV heads (GQA groups of g = {heads // n_kv_heads})"])
    lines = wrapped(lesson_segments(layer, step), width) + wrapped(list(note), width)
    if window is not None and outside is not None:
        start, stop = window
        lines += wrapped(window_segments(outside, last_row, stop == n, start, average), width)
        what.append(f"· tokens {start}-{stop - 1} at full resolution")
    elif factor > 1:
        alone = " (the newest row alone)" if own else ""
        what += [f"· a cell spans {factor} tokens a side{alone}:", "its queries' mean weight summed over its keys"]
    return "<br>".join(lines + wrapped(what, width))


def cell_hover(pooled: bool) -> str:
    """The hover of a matrix cell: its tokens and its exact (float32) value."""
    if pooled:
        return ("queries %{y}<br>keys %{x}<br>weight %{z:.6g}: each query's probabilities summed over "
                "these keys,<br>then the mean over these queries<extra></extra>")
    return "query %{y}<br>key %{x}<br>probability %{z:.6g}<extra></extra>"


def outside_hover(first_key: int) -> str:
    """The hover of the column of weight outside a zoom window."""
    return (f"query %{{y}}<br>keys #0–{first_key - 1}, before the window<br>weight %{{z:.6g}}: "
            "this query's probabilities summed over them<extra></extra>")


@dataclass(frozen=True)
class PanelGeometry:
    """Where the panels go, in pixels, for a figure `FIGURE_WIDTH_PX` wide at normal size.

    Attributes:
        panel_w, panel_h: one panel's plot area.
        columns: panels per grid row.
        margin: the figure's margins ("l", "r", "t", "b").
        height: the figure's height.
        vertical_spacing: between grid rows, as make_subplots takes it (a fraction of the plot height).
    """

    panel_w: float
    panel_h: float
    columns: int
    margin: dict[str, int]
    height: int
    vertical_spacing: float

    def drawn_panel_w(self, scale: float) -> float:
        """The panel's width when drawn at text scale `scale`: presenter mode widens the left margin
        (`theme.presenter_style`), not the figure."""
        plot_w = FIGURE_WIDTH_PX - self.margin["l"] * scale - self.margin["r"]
        return plot_w * (1 - H_SPACING * (self.columns - 1)) / self.columns


def panel_geometry(grid_rows: int, columns: int, title_lines: int, key_ticks: list[str],
                   query_ticks: list[str]) -> PanelGeometry:
    """Margins that hold the title's lines and the longest tick labels (the keys' turned upright);
    panels as tall as the figure's `MAX_HEIGHT_PX` allow (up to three grid rows: 9 heads in groups of
    3 fit a 1280x720 screen), at most as tall as they are wide and 420 px, and at least 90 px (32
    heads: the figure is then taller than a screen)."""
    margin = {"l": round(64 + text_px(query_ticks, TICK_FONT_PX)), "r": COLOURBAR_PX,
              "t": TITLE_TOP_PX + TITLE_LINE_PX * title_lines + TITLE_PAD_PX,
              "b": round(46 + text_px(key_ticks, TICK_FONT_PX))}
    panel_w = PanelGeometry(0, 0, columns, margin, 0, 0).drawn_panel_w(1.0)
    fit = (MAX_HEIGHT_PX - margin["t"] - margin["b"] - (grid_rows - 1) * GAP_PX) / grid_rows
    panel_h = float(math.floor(min(420.0, panel_w, max(90.0, fit))))
    plot_h = grid_rows * panel_h + (grid_rows - 1) * GAP_PX
    return PanelGeometry(panel_w, panel_h, columns, margin, round(plot_h + margin["t"] + margin["b"]),
                         round(GAP_PX / plot_h, 4) if grid_rows > 1 else 0.0)
