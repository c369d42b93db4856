"""The attention view: one layer's causal attention probabilities, one heatmap per query head.

Query heads that share a KV head (GQA) sit together, and each panel says which KV head it reads.
Rows are queries in step order (the prefill's T rows, then one row per decode step, newest at the
bottom); columns are keys. Above the causal diagonal nothing is drawn.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import plotly.graph_objects as go

from explorer.figures.dims import coloured
from explorer.figures.theme import HIGHLIGHT_COLOUR, axis_key, base_layout, plain_label, subplot_grid, visible_piece

MAX_TICKS = 40  # token labels per axis before thinning
TICK_PX = 13  # room one 10 px tick label needs
MAX_CELLS = 24_000  # heatmap cells per figure: ~128 KB of base64 float32
MASKED_COLOUR = "#e8e8e8"  # behind NaN cells: the masked (future) keys
MAX_PIECE_CHARS = 12
MAX_GRID_COLUMNS = 6


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
    heads, prompt = first.shape[0], first.shape[1]
    size = prompt + len(blocks) - 1
    stacked = np.full((heads, size, size), np.nan, dtype=np.float32)
    stacked[:, :prompt, :prompt] = first
    for k, block in enumerate(blocks[1:], start=1):
        n = prompt + k  # context length after decode step k
        if block.ndim != 3 or block.shape[0] != heads or block.shape[1] != 1 or block.shape[2] > n:
            raise ValueError(f"Decode step {k}'s block must be [{heads}, 1, <= {n}], got {list(block.shape)}.")
        stacked[:, n - 1, :n] = 0.0
        stacked[:, n - 1, n - block.shape[2]:n] = block[:, 0, :]
    stacked[:, np.triu(np.ones((size, size), dtype=bool), k=1)] = np.nan
    return stacked


def attention_figure(probs: np.ndarray, pieces: list[str], n_kv_heads: int, layer: int, step: int,
                     new_rows: int = 0, average: bool = False, window_start: int | None = None) -> go.Figure:
    """Heatmaps of attention probabilities, one per query head grouped by KV head, or their mean.

    A long context is pooled so that the figure stays within `MAX_CELLS` cells (see `pool_attention`);
    the title then says how many tokens a cell spans.

    Args:
        probs: [h_q, rows, n] float32 probabilities (rows = n for a full stacked matrix; NaN draws blank).
        pieces: the n token pieces, the keys; the queries are the last `rows` of them.
        n_kv_heads: h_kv; h_q / h_kv query heads share each KV head.
        layer: the decoder layer shown (for the title).
        step: the step shown (0 = prefill), for `layout.meta`.
        new_rows: the newest query rows (the last ones) to outline, e.g. 1 for a decode step.
        average: draw one panel, the mean over the query heads.
        window_start: the matrix is a window of the whole one, starting at this token (0-based): drawn at
            full resolution, never pooled (the caller keeps it small), and named in the title.

    Returns:
        A figure with `layout.meta == {"view": "attention", "step": step}`: one heatmap trace per
        panel (z: [query blocks, key blocks] float32, x / y: block labels, sharing one 0..1 colour
        axis), one subplot-title annotation per panel, and with `new_rows` one rectangle shape per panel.

    Raises:
        ValueError: `probs` not 3-D, `pieces` not n long, rows > n, h_q not a multiple of `n_kv_heads`,
            or `new_rows` outside 0..rows.
    """
    _check(probs, pieces, n_kv_heads, new_rows)
    heads, rows, n = probs.shape
    group = heads // n_kv_heads
    panels = [(probs.mean(axis=0, dtype=np.float32), f"mean over {heads} query heads")] if average else [
        (probs[h], f"q head {h} · KV head {h // group}") for h in range(heads)]
    factor = 1 if window_start is not None else pooling_factor(n, len(panels))
    columns = 1 if average else grid_columns(heads, group)
    grid_rows = math.ceil(len(panels) / columns)
    panel_px = _panel_px(grid_rows, columns)
    layout, cells = subplot_grid([title for _, title in panels], rows=grid_rows, cols=columns, shared_xaxes=True,
                                 shared_yaxes=True, horizontal_spacing=0.02,
                                 vertical_spacing=60 / (grid_rows * panel_px + 60))
    panel_cells = [cells[index // columns + 1, index % columns + 1] for index in range(len(panels))]
    keys = _block_labels(pieces, np.arange(0, n, factor))
    queries = _block_labels(pieces, n - rows + _query_block_starts(n - rows, rows, factor))
    key_names, query_names = [k for k, _ in keys], [q for q, _ in queries]
    data = [{"type": "heatmap", "z": pool_attention(z, n, factor), "x": key_names, "y": query_names,
             "coloraxis": "coloraxis", "hovertemplate": "query %{y}<br>key %{x}<br>probability %{z:.3f}<extra></extra>",
             **cell} for (z, _), cell in zip(panels, panel_cells, strict=True)]
    if new_rows:
        first_new = (n - new_rows) // factor - (n - rows) // factor
        layout["shapes"] = _row_outlines(panel_cells, first_new, len(queries), len(keys))
    _style(layout, cells, keys, queries, grid_rows, columns, panel_px)
    fig = go.Figure(data=data, layout=layout)
    what = "mean over heads" if average else (f"{coloured('h_q')} = {heads} query heads, "
                                              f"{coloured('h_kv')} = {n_kv_heads} KV heads (GQA groups of g = {group})")
    if window_start is not None:
        detail = f" · tokens {window_start}-{window_start + n - 1} at full resolution"
    else:
        detail = f" · a cell spans {factor} tokens (its queries' mean weight on its keys)" if factor > 1 else ""
    return base_layout(fig, "attention", step, f"Attention probabilities, layer {layer}: {what}{detail}",
                       height=grid_rows * panel_px + 220)


def pooling_factor(n: int, panels: int, max_cells: int = MAX_CELLS) -> int:
    """Tokens per cell side so that `panels` panels of n x n cells stay within `max_cells` cells."""
    side = max(1, math.isqrt(max_cells // panels))
    return math.ceil(n / side)


def pool_attention(probs: np.ndarray, n: int, factor: int) -> np.ndarray:
    """Probabilities over blocks of `factor` tokens: the mass a query puts on a block of keys (summed),
    averaged over the queries of a block; blocks are aligned on absolute positions 0, f, 2f, ...

    Args:
        probs: [rows, n] float32; the rows are the last `rows` query positions; NaN = masked (0 mass).
        n: the number of keys (context length).
        factor: tokens per block; 1 returns `probs` unchanged.

    Returns:
        [query blocks, key blocks] float32; NaN where no query of the block sees a key of the block.
    """
    if factor == 1:
        return probs.astype(np.float32)
    rows = probs.shape[0]
    seen = np.isfinite(probs)
    key_starts = np.arange(0, n, factor)
    mass = np.add.reduceat(np.where(seen, probs, 0.0), key_starts, axis=1)
    visible = np.add.reduceat(seen, key_starts, axis=1)
    query_starts = _query_block_starts(n - rows, rows, factor)
    sizes = np.diff(np.append(query_starts, rows))[:, None]
    pooled = np.add.reduceat(mass, query_starts, axis=0) / sizes
    return np.where(np.add.reduceat(visible, query_starts, axis=0) > 0, pooled, np.nan).astype(np.float32)


def _query_block_starts(first: int, rows: int, factor: int) -> np.ndarray:
    """Row indices where a block starts, rows being absolute positions first..first+rows-1."""
    positions = np.arange(first, first + rows)
    return np.flatnonzero((positions % factor == 0) | (positions == first))


def _block_labels(pieces: list[str], starts: np.ndarray) -> list[tuple[str, str]]:
    """(unique category, tick text) per block of positions starting at `starts` (the last ends at n);
    the pieces escaped for Plotly, which shows a category in the ticks and the hover."""
    bounds = [*starts.tolist(), len(pieces)]
    labels = []
    for a, b in pairwise(bounds):
        piece = plain_label(visible_piece(pieces[a], MAX_PIECE_CHARS))
        labels.append((f"#{a} {piece}" if b - a == 1 else f"#{a}–{b - 1} {piece}…", piece))
    return labels


def grid_columns(n_heads: int, group: int) -> int:
    """Panels per grid row: a whole GQA group per row where it fits (g <= 6 columns), else a divisor
    of g; small groups (MHA, g = 2) share a row, up to 4 panels."""
    if group == 1 or group * 2 <= 4:
        return min(n_heads, 4 // group * group)
    if group <= MAX_GRID_COLUMNS:
        return group
    return max(d for d in range(1, MAX_GRID_COLUMNS + 1) if group % d == 0)


def thinned_ticks(count: int, max_ticks: int = MAX_TICKS) -> list[int]:
    """At most `max_ticks` evenly spaced indices of `count` labels, always keeping the last (newest)."""
    if count <= max_ticks:
        return list(range(count))
    stride = math.ceil(count / max_ticks)
    ticks = list(range(0, count, stride))
    if count - 1 - ticks[-1] < stride:  # too close to the last label to stay legible
        ticks.pop()
    return [*ticks, count - 1]


def _check(probs: np.ndarray, pieces: list[str], n_kv_heads: int, new_rows: int) -> None:
    if probs.ndim != 3:
        raise ValueError(f"probs must be [h_q, rows, n], got {list(probs.shape)}.")
    heads, rows, n = probs.shape
    if len(pieces) != n or rows > n:
        raise ValueError(f"probs {list(probs.shape)} needs rows <= n and {n} pieces, got {len(pieces)}.")
    if n_kv_heads < 1 or heads % n_kv_heads:
        raise ValueError(f"{heads} query heads cannot be grouped over {n_kv_heads} KV heads.")
    if not 0 <= new_rows <= rows:
        raise ValueError(f"new_rows must be within 0..{rows}, got {new_rows}.")


def _row_outlines(panel_cells: list[dict[str, str]], first: int, stop: int, n_keys: int) -> list[dict]:
    """Rectangles around query rows first..stop-1 (category positions), one per panel."""
    return [{"type": "rect", "xref": cell["xaxis"], "yref": cell["yaxis"], "x0": -0.5, "x1": n_keys - 0.5,
             "y0": first - 0.5, "y1": stop - 0.5, "line": {"color": HIGHLIGHT_COLOUR, "width": 2},
             "fillcolor": "rgba(0,0,0,0)", "name": "newest rows"} for cell in panel_cells]


def _style(layout: dict, cells: dict[tuple[int, int], dict[str, str]], keys: list[tuple[str, str]],
           queries: list[tuple[str, str]], grid_rows: int, columns: int, panel_px: int) -> None:
    """Thinned token ticks on the outer axes only (the inner ones share them), one 0..1 colour scale."""
    key_ticks = thinned_ticks(len(keys), min(MAX_TICKS, 1150 // columns // TICK_PX))
    query_ticks = thinned_ticks(len(queries), min(MAX_TICKS, panel_px // TICK_PX))
    for (row, col), cell in cells.items():
        x_axis, y_axis = layout[axis_key(cell["xaxis"])], layout[axis_key(cell["yaxis"])]
        x_axis.update(showgrid=False, tickfont={"size": 10}, tickangle=-90)
        y_axis.update(showgrid=False, tickfont={"size": 10}, autorange="reversed")
        if row == grid_rows:
            x_axis.update(tickmode="array", tickvals=[keys[i][0] for i in key_ticks],
                          ticktext=[keys[i][1] for i in key_ticks])
        if col == 1:
            y_axis.update(tickmode="array", tickvals=[queries[i][0] for i in query_ticks],
                          ticktext=[queries[i][1] for i in query_ticks])
    layout[axis_key(cells[grid_rows, 1]["xaxis"])]["title"] = {"text": "key (token attended to)"}
    layout[axis_key(cells[1, 1]["yaxis"])]["title"] = {"text": "query"}
    for note in layout["annotations"]:
        note["font"] = {"size": 12}
    layout.update(coloraxis={"colorscale": "Blues", "cmin": 0.0, "cmax": 1.0,
                             "colorbar": {"title": {"text": "probability", "side": "right"}, "thickness": 14}},
                  plot_bgcolor=MASKED_COLOUR)


def _panel_px(grid_rows: int, columns: int) -> int:
    """Panels as tall as the figure's 640 px allow (up to three grid rows of panels: 9 heads in groups
    of 3 fit a 1280x720 screen), at most as tall as they are wide at 1280 px; with more grid rows
    (32 heads) at least 90 px, and the figure is taller than a screen."""
    return min(int(1100 / columns * 0.85), max(90, 420 // grid_rows), 420)
