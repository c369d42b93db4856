"""The attention view: one layer's causal attention probabilities, one heatmap per query head.

Query heads that share a KV head (GQA) sit together, and each panel says which KV head it reads.
Rows are queries (destination tokens) in step order (the prefill's T rows, then one row per decode
step, newest at the bottom); columns are keys (source tokens). Above the causal diagonal nothing is
drawn. The colour is p ** `GAMMA`, so that weights of 0.001 still show; the hover gives p itself,
the stored float32 value: the heatmaps' z are the probabilities (or their pooled sums), and only
the colour scale is bent. A long matrix is pooled into blocks of tokens; a zoom window is drawn at
full resolution, with the weight its rows put on keys before it as a column at its left.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from explorer.analysis.pooling import key_block_mass, key_blocks, pool_rows, query_block_starts
from explorer.figures.attention_labels import (
    H_SPACING,
    PanelGeometry,
    block_labels,
    cell_hover,
    figure_title,
    fitted_ticks,
    outside_hover,
    panel_geometry,
)
from explorer.figures.theme import (
    HIGHLIGHT_COLOUR,
    PRESENTER_SCALE,
    TITLE_ASCENT_PX,
    TITLE_TOP_PX,
    axis_key,
    base_layout,
    set_layout,
    subplot_grid,
)

MAX_CELLS = 24_000  # heatmap cells per figure: ~128 KB of base64 float32
MASKED_COLOUR = "#e8e8e8"  # behind NaN cells: the masked (future) keys
MAX_GRID_COLUMNS = 6
GAMMA = 0.3  # colour = p ** GAMMA: p = 0.001 sits at 13% of the colour scale, 0.01 at 25%, 0.1 at 50%
COLOUR_TICKS = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0)  # the colour bar's labels, in probabilities
BASE_SCALE = "Blues"  # the colour scale that p ** GAMMA runs along
# The attention window drawn at full resolution: 48^2 cells x 32 heads (Qwen3-8B) stay under ~400 KB.
ZOOM_TOKENS = 48
COLOUR_STOPS = 65  # stops of the bent scale: within 2/255 of Blues(p ** GAMMA) everywhere
X_TITLE = "key (source) token: the one attended to"
Y_TITLE = "query (destination) token:<br>the one attending"


def stack_attention(blocks: list[np.ndarray]) -> np.ndarray:
    """One causal matrix from the prefill's block and each decode step's row.

    Args:
        blocks: the prefill's probabilities [h_q, T, T], then decode step k's [h_q, 1, kv_len_k]
            (float32, rows sum to 1), in step order. A decode row narrower than T + k (a sliding-window
            layer keeps only its last keys) holds the last keys: it is right-aligned, earlier keys 0.

    Returns:
        [h_q, T + K, T + K] float32 (K decode steps); query rows in step order; NaN above the causal
        diagonal, so it draws blank.

    Raises:
        ValueError: no blocks; a block not 3-D; head counts differ; the prefill block not square; a
            decode block with more than one row or wider than its context T + k.
    """
    if not blocks:
        raise ValueError("No attention blocks to stack.")
    first = blocks[0]
    if first.ndim != 3 or first.shape[1] != first.shape[2]:
        raise ValueError(f"The prefill block must be [h_q, T, T], got {list(first.shape)}.")
    return stack_rows(first, 0, blocks[1:], first.shape[2] + len(blocks) - 1)


def stack_rows(prefill_rows: np.ndarray, first_row: int, decode: list[np.ndarray], n: int) -> np.ndarray:
    """Query rows first_row.. of the stacked causal matrix (`stack_attention`): some of the prefill's
    rows, then the rows of the decode steps that follow them (a zoom window's rows).

    Args:
        prefill_rows: [h_q, r, T] float32, the prefill's rows first_row..first_row + r - 1 (r may be 0).
        first_row: the absolute position of the first row.
        decode: the decode blocks [h_q, 1, kv_len] of the next rows, one per step, each holding the
            last kv_len keys of its context (its position + 1); none unless the prefill's rows end at T.
        n: the keys drawn, 0..n-1.

    Returns:
        [h_q, r + len(decode), n] float32; NaN above the causal diagonal (a row's keys after itself).

    Raises:
        ValueError: a block not 3-D; head counts differ; decode rows after prefill rows that stop
            before T; a decode block with more than one row or wider than its context.
    """
    if prefill_rows.ndim != 3:
        raise ValueError(f"The prefill rows must be [h_q, r, T], got {list(prefill_rows.shape)}.")
    heads, prompt_rows, prompt = prefill_rows.shape
    if decode and first_row + prompt_rows < prompt:
        raise ValueError(f"Decode rows follow the prefill's last row ({prompt - 1}), not row {first_row + prompt_rows}.")
    stacked = np.full((heads, prompt_rows + len(decode), n), np.nan, dtype=np.float32)
    stacked[:, :prompt_rows, :prompt] = prefill_rows
    for k, block in enumerate(decode):
        row = prompt_rows + k
        context = first_row + row + 1
        if block.ndim != 3 or block.shape[0] != heads or block.shape[1] != 1 or block.shape[2] > context:
            raise ValueError(f"The decode block at position {context - 1} must be [{heads}, 1, <= {context}], "
                             f"got {list(block.shape)}.")
        stacked[:, row, :context] = 0.0
        stacked[:, row, context - block.shape[2]:context] = block[:, 0, :]
    stacked[:, np.triu(np.ones((stacked.shape[1], n), dtype=bool), k=first_row + 1)] = np.nan
    return stacked


def attention_figure(probs: np.ndarray, pieces: list[str], n_kv_heads: int, layer: int, step: int,
                     new_rows: int = 0, average: bool = False, window: tuple[int, int] | None = None,
                     presenter: bool = False, head_notes: list[str] | None = None, note: Sequence[str] = (),
                     first_row: int | None = None, key_factor: int = 1) -> go.Figure:
    """Heatmaps of attention probabilities, one per query head grouped by KV head, or their mean.

    A long context is pooled so that the figure stays within `MAX_CELLS` cells (see `pool_attention`;
    the newest rows stay a block of their own); the title then says how many tokens a cell spans and
    the ticks name each block's token range. With `window`, only the window's rows and keys are drawn,
    at full resolution, and a column at the left holds each row's weight on the keys before it.

    Args:
        probs: [h_q, rows, n] float32 probabilities (rows = n for a full stacked matrix; NaN draws blank);
            with `key_factor` > 1, [h_q, rows, ceil(n / key_factor)] key-block masses
            (`explorer.analysis.pooling.key_block_mass`) of a matrix pooled by that factor.
        pieces: the n token pieces, the keys; the queries are the last `rows` of them, unless `first_row`.
        n_kv_heads: h_kv; h_q / h_kv query heads share each KV head.
        layer: the decoder layer shown (for the title).
        step: the step shown (0 = prefill), for the title and `layout.meta`.
        new_rows: the newest query rows (the last ones) to outline, e.g. 1 for a decode step.
        average: draw one panel, the mean over the query heads.
        window: (start, stop), absolute token positions with 0 <= start < stop <= n: draw query rows and
            keys start..stop-1 only (the caller keeps the window small), never pooled, named in the title.
        presenter: the figure will be drawn in presenter style (`theme.presenter_style`, larger text):
            fewer tick labels where the larger ones would not fit, and shorter title lines.
        head_notes: text appended to each query head's panel title (h_q of them; not with `average`).
        note: title segments after its first sentence (e.g. the attention sinks measured), wrapped as it is.
        first_row: the absolute position of the first of `probs`' rows (a window's rows, given alone);
            None: n - rows.
        key_factor: `probs` holds key-block masses of this many tokens a block (not with `window`):
            the figure is pooled by that factor, which the caller takes from `pooling_factor`.

    Returns:
        A figure with `layout.meta == {"view": "attention", "step": step}`: one heatmap trace per panel
        first (z: [query blocks, key blocks] float32, the probabilities or pooled sums; x / y: block
        categories; colour axis "coloraxis", bent to p ** GAMMA), then, in a window starting after 0,
        one [rows, 1] heatmap per panel of the weight outside it; last a marker-less scatter that
        carries the colour bar ("coloraxis2": the base scale, ticks at p ** GAMMA labelled p). One
        subplot-title annotation per panel; with `new_rows` shown, one rectangle shape per panel.

    Raises:
        ValueError: `probs` not 3-D, `pieces` not n long, rows > n, h_q not a multiple of `n_kv_heads`,
            `new_rows` outside 0..rows, or `window` outside 0..n or holding none of the query rows.
    """
    _check(probs, pieces, n_kv_heads, new_rows, window, first_row, key_factor)
    heads, rows, n = probs.shape[0], probs.shape[1], len(pieces)
    group = heads // n_kv_heads
    first_query = n - rows if first_row is None else first_row
    (key_start, key_stop) = window if window is not None else (0, n)
    query_start, query_stop = max(key_start, first_query), key_stop
    own = max(0, query_stop - max(n - new_rows, query_start))  # the newest rows in view
    seen = probs[:, query_start - first_query:query_stop - first_query]  # [h_q, shown rows, n]
    matrices = [seen.mean(axis=0, dtype=np.float32)] if average else list(seen)
    titles = [f"mean over {heads} query heads"] if average else [
        f"q head {h} · KV head {h // group}{head_notes[h] if head_notes else ''}" for h in range(heads)]
    factor = 1 if window is not None else key_factor if key_factor > 1 else pooling_factor(n, len(matrices))
    query_starts = query_start + query_block_starts(query_start, query_stop - query_start, factor, own)
    queries = block_labels(pieces, query_starts, query_stop)
    keys = block_labels(pieces, np.arange(key_start, key_stop, factor), key_stop)
    if key_start > 0:  # the window's rows also weigh the keys before it: one column of their sums
        keys = [(f"#0–{key_start - 1} (before the window)", f"outside 0–{key_start - 1}"), *keys]

    # [shown rows] float32 per panel: each row's weight on keys outside the window, from its whole row
    outside = [] if window is None else [outside_weight(m[None], key_start, key_stop)[0] for m in matrices]
    scale = PRESENTER_SCALE if presenter else 1.0
    title = figure_title(layer, step, heads, n_kv_heads, average, factor, own, window,
                         np.array([o[-1] for o in outside], np.float32), queries[-1][0], n, scale, note)
    columns = 1 if average else grid_columns(heads, group)
    grid_rows = math.ceil(len(matrices) / columns)
    geometry = panel_geometry(grid_rows, columns, title.count("<br>") + 1, [t for _, t in keys], [t for _, t in queries])
    layout, cells = subplot_grid(titles, rows=grid_rows, cols=columns, shared_xaxes=True, shared_yaxes=True,
                                 horizontal_spacing=H_SPACING, vertical_spacing=geometry.vertical_spacing)
    panel_cells = [cells[index // columns + 1, index % columns + 1] for index in range(len(matrices))]
    key_names, query_names = [k for k, _ in keys], [q for q, _ in queries]
    pooled = [pool_rows(m, n, factor, own) if key_factor > 1 else pool_attention(m[:, key_start:key_stop], n, factor, own)
              for m in matrices]
    data = [{"type": "heatmap", "z": z,
             "x": key_names[1:] if key_start > 0 else key_names, "y": query_names, "coloraxis": "coloraxis",
             "hovertemplate": cell_hover(factor > 1), **cell} for z, cell in zip(pooled, panel_cells, strict=True)]
    if key_start > 0:
        data += [{"type": "heatmap", "z": o[:, None], "x": key_names[:1], "y": query_names, "coloraxis": "coloraxis",
                  "xgap": 3, "hovertemplate": outside_hover(key_start), **cell}
                 for o, cell in zip(outside, panel_cells, strict=True)]
    data.append(_colour_bar_carrier(panel_cells[0]))
    if own:
        first_new = int(np.searchsorted(query_starts, query_stop - own))
        layout["shapes"] = _row_outlines(panel_cells, first_new, len(queries), len(keys))
    _style(layout, cells, keys, queries, grid_rows, columns, geometry, scale, key_start > 0)
    fig = go.Figure(data=data, layout=layout)
    base_layout(fig, "attention", step, title, height=geometry.height)
    # plotly.js anchors a "top" title of several lines by its first line's baseline, the rest below it
    return set_layout(fig, margin=geometry.margin, title={
        **fig.layout.title.to_plotly_json(), "yref": "container", "yanchor": "top",
        "y": 1 - (TITLE_TOP_PX + TITLE_ASCENT_PX) / geometry.height})


def outside_weight(probs: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The weight each query row puts on keys outside positions start..stop-1, from its whole row.

    Args:
        probs: [h, rows, n] float32 probabilities over all n keys (NaN = masked: no weight).
        start, stop: the window's keys, 0 <= start <= stop <= n.

    Returns:
        [h, rows] float32, the sum (in float64) of each row's probabilities outside the window.
    """
    inside = np.zeros(probs.shape[-1], dtype=bool)
    inside[start:stop] = True
    return np.nansum(probs[..., ~inside], axis=-1, dtype=np.float64).astype(np.float32)


def pooling_factor(n: int, panels: int, max_cells: int = MAX_CELLS) -> int:
    """Tokens per cell side so that `panels` panels of n x n cells stay within `max_cells` cells."""
    side = max(1, math.isqrt(max_cells // panels))
    return math.ceil(n / side)


def pool_attention(probs: np.ndarray, n: int, factor: int, own_rows: int = 0) -> np.ndarray:
    """Probabilities over blocks of `factor` tokens: the mass a query puts on a block of keys (summed),
    averaged over the queries of a block; blocks are aligned on absolute positions 0, f, 2f, ...,
    and the last `own_rows` queries start a block of their own (the newest token stays one row).

    Args:
        probs: [rows, keys] float32; the rows are the last `rows` of n query positions, the keys
            positions 0..keys-1; NaN = masked (0 mass).
        n: the context length (the rows' absolute positions are n - rows .. n - 1).
        factor: tokens per block; 1 returns `probs` unchanged (as float32).
        own_rows: the newest rows (0..rows) that make a block apart from the ones before.

    Returns:
        [query blocks, key blocks] float32; NaN where no query of the block sees a key of the block.
    """
    if factor == 1:
        return probs.astype(np.float32)
    return pool_rows(key_block_mass(np.where(np.isfinite(probs), probs, np.float32(0)), factor), n, factor, own_rows)


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


def grid_columns(n_heads: int, group: int) -> int:
    """Panels per grid row: a whole GQA group per row where it fits (g <= 6 columns), else a divisor
    of g; small groups (MHA, g = 2) share a row, up to 4 panels."""
    if group == 1 or group * 2 <= 4:
        return min(n_heads, 4 // group * group)
    if group <= MAX_GRID_COLUMNS:
        return group
    return max(d for d in range(1, MAX_GRID_COLUMNS + 1) if group % d == 0)


def _check(probs: np.ndarray, pieces: list[str], n_kv_heads: int, new_rows: int,
           window: tuple[int, int] | None, first_row: int | None, key_factor: int) -> None:
    if probs.ndim != 3:
        raise ValueError(f"probs must be [h_q, rows, n], got {list(probs.shape)}.")
    heads, rows, width = probs.shape
    n = len(pieces)
    first = n - rows if first_row is None else first_row
    if width != key_blocks(n, key_factor) or not 0 <= first <= first + rows <= n:
        raise ValueError(f"probs {list(probs.shape)} needs rows {first}.. within the {n} pieces and "
                         f"{key_blocks(n, key_factor)} key columns.")
    if key_factor > 1 and window is not None:
        raise ValueError("A window is drawn from probabilities, not key-block masses.")
    if n_kv_heads < 1 or heads % n_kv_heads:
        raise ValueError(f"{heads} query heads cannot be grouped over {n_kv_heads} KV heads.")
    if not 0 <= new_rows <= rows:
        raise ValueError(f"new_rows must be within 0..{rows}, got {new_rows}.")
    if window is not None and not (0 <= window[0] < window[1] <= n and window[1] > first
                                   and window[1] <= first + rows):
        raise ValueError(f"The window must lie within tokens 0..{n} and hold one of the query rows "
                         f"{first}..{first + rows - 1}, got {window}.")


def _colour_bar_carrier(cell: dict[str, str]) -> dict:
    """A scatter with no point to draw, whose marker colour axis ("coloraxis2") draws the colour bar:
    the base scale evenly, labelled in probabilities where p ** GAMMA falls."""
    return {"type": "scatter", "x": [None], "y": [None], "mode": "markers", "hoverinfo": "skip",
            "showlegend": False, "marker": {"color": [0.0], "coloraxis": "coloraxis2"}, **cell}


def _row_outlines(panel_cells: list[dict[str, str]], first: int, stop: int, n_keys: int) -> list[dict]:
    """Rectangles around query rows first..stop-1 (category positions), one per panel."""
    return [{"type": "rect", "xref": cell["xaxis"], "yref": cell["yaxis"], "x0": -0.5, "x1": n_keys - 0.5,
             "y0": first - 0.5, "y1": stop - 0.5, "line": {"color": HIGHLIGHT_COLOUR, "width": 2},
             "fillcolor": "rgba(0,0,0,0)", "name": "newest rows"} for cell in panel_cells]


def _style(layout: dict, cells: dict[tuple[int, int], dict[str, str]], keys: list[tuple[str, str]],
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


def zoom_window(zoom: int, n: int) -> tuple[int, int]:
    """The `ZOOM_TOKENS`-token window of n tokens drawn for a zoom from token `zoom` (kept inside 0..n)."""
    start = max(0, min(zoom, n - ZOOM_TOKENS))
    return start, min(start + ZOOM_TOKENS, n)
