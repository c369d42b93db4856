"""The attention view: one layer's causal attention probabilities, one heatmap per query head.

Query heads that share a KV head (GQA) sit together, and each panel says which KV head it reads.
Rows are queries (destination tokens) in step order (the prefill's T rows, then one row per decode
step, newest at the bottom); columns are keys (source tokens). Above the causal diagonal nothing is
drawn. The colour is p ** `GAMMA` (`explorer.figures.attention_style`), so that weights of 0.001
still show; the hover gives p itself, the stored float32 value: the heatmaps' z are the
probabilities (or their pooled sums), and only the colour scale is bent. A long matrix is pooled
into blocks of tokens so that the figure stays within `MAX_CELLS` cells (`pool_attention`; the
newest rows stay a block of their own); the title then says how many tokens a cell spans and the
ticks name each block's token range. A zoom window is drawn at full resolution, with the weight its
rows put on keys before it as a column at its left.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.pooling import key_block_mass, key_blocks, pool_rows, query_block_starts
from explorer.figures.attention_labels import (
    H_SPACING,
    PanelGeometry,
    block_labels,
    cell_hover,
    figure_title,
    outside_hover,
    panel_geometry,
)
from explorer.figures.attention_style import colour_bar_carrier, row_outlines, style_axes
from explorer.figures.theme import (
    PRESENTER_SCALE,
    TITLE_ASCENT_PX,
    TITLE_TOP_PX,
    base_layout,
    set_layout,
    subplot_grid,
)

MAX_CELLS = 24_000  # heatmap cells per figure: ~128 KB of base64 float32
MAX_GRID_COLUMNS = 6
# The attention window drawn at full resolution: 48^2 cells x 32 heads (Qwen3-8B) stay under ~400 KB.
ZOOM_TOKENS = 48


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
    """Heatmaps of attention probabilities, one per query head grouped by KV head, or their mean; a
    long context pooled into blocks of tokens (see the module docstring), a `window` at full resolution.

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
    heads, n = probs.shape[0], len(pieces)
    shown = _shown(probs, n, new_rows, average, window, first_row, key_factor)
    keys, queries = _block_names(pieces, shown)
    scale = PRESENTER_SCALE if presenter else 1.0
    title = figure_title(layer, step, heads, n_kv_heads, average, shown.factor, shown.own, window,
                         np.array([o[-1] for o in shown.outside], np.float32), queries[-1][0], n, scale, note)
    columns = 1 if average else grid_columns(heads, heads // n_kv_heads)
    grid_rows = math.ceil(len(shown.matrices) / columns)
    geometry = panel_geometry(grid_rows, columns, title.count("<br>") + 1, [t for _, t in keys], [t for _, t in queries])
    layout, cells = subplot_grid(_panel_titles(heads, n_kv_heads, average, head_notes), rows=grid_rows, cols=columns,
                                 shared_xaxes=True, shared_yaxes=True, horizontal_spacing=H_SPACING,
                                 vertical_spacing=geometry.vertical_spacing)
    panel_cells = [cells[index // columns + 1, index % columns + 1] for index in range(len(shown.matrices))]
    data = _heatmaps(shown, keys, queries, panel_cells, n, key_factor)
    if shown.own:
        layout["shapes"] = row_outlines(panel_cells, shown.first_new_block, len(queries), len(keys))
    style_axes(layout, cells, keys, queries, grid_rows, columns, geometry, scale, shown.key_start > 0)
    return _titled(go.Figure(data=data, layout=layout), step, title, geometry)


@dataclass(frozen=True)
class _Shown:
    """What the figure draws of `attention_figure`'s `probs`, and how its rows and keys are blocked.

    Attributes:
        matrices: per panel, [shown rows, keys] float32: a query head's rows (or, with `average`, the
            one mean over the query heads); keys: n probabilities, or the key-block masses given.
        factor: tokens per cell side (1: full resolution).
        own: the newest query rows in view, a block of their own (0: none in view).
        key_start, key_stop: the keys drawn, token positions key_start..key_stop-1 (a window, or 0..n).
        query_stop: the query rows drawn end before this position (they start at `query_starts[0]`).
        query_starts: [query blocks] int, each block's first token position.
        outside: per panel, [shown rows] float32: each row's weight on keys outside the window, from its
            whole row; empty without a window.
    """

    matrices: list[np.ndarray]
    factor: int
    own: int
    key_start: int
    key_stop: int
    query_stop: int
    query_starts: np.ndarray
    outside: list[np.ndarray]

    @property
    def first_new_block(self) -> int:
        """The index of the first query block of the newest rows."""
        return int(np.searchsorted(self.query_starts, self.query_stop - self.own))


def _shown(probs: np.ndarray, n: int, new_rows: int, average: bool, window: tuple[int, int] | None,
           first_row: int | None, key_factor: int) -> _Shown:
    """The rows and keys drawn of `probs` and their blocks (arguments as `attention_figure`'s)."""
    first_query = n - probs.shape[1] if first_row is None else first_row
    (key_start, key_stop) = window if window is not None else (0, n)
    query_start, query_stop = max(key_start, first_query), key_stop
    own = max(0, query_stop - max(n - new_rows, query_start))  # the newest rows in view
    seen = probs[:, query_start - first_query:query_stop - first_query]  # [h_q, shown rows, n]
    matrices = [seen.mean(axis=0, dtype=np.float32)] if average else list(seen)
    factor = 1 if window is not None else key_factor if key_factor > 1 else pooling_factor(n, len(matrices))
    query_starts = query_start + query_block_starts(query_start, query_stop - query_start, factor, own)
    outside = [] if window is None else [outside_weight(m[None], key_start, key_stop)[0] for m in matrices]
    return _Shown(matrices, factor, own, key_start, key_stop, query_stop, query_starts, outside)


def _block_names(pieces: list[str], shown: _Shown) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(category, tick text) of each key block and each query block (`block_labels`); in a window
    starting after 0, a first key column of the weight before it."""
    queries = block_labels(pieces, shown.query_starts, shown.query_stop)
    keys = block_labels(pieces, np.arange(shown.key_start, shown.key_stop, shown.factor), shown.key_stop)
    if shown.key_start > 0:  # the window's rows also weigh the keys before it: one column of their sums
        keys = [(f"#0–{shown.key_start - 1} (before the window)", f"outside 0–{shown.key_start - 1}"), *keys]
    return keys, queries


def _panel_titles(heads: int, n_kv_heads: int, average: bool, head_notes: list[str] | None) -> list[str]:
    """Each panel's title: its query head and the KV head it reads (and its note), or the mean's."""
    if average:
        return [f"mean over {heads} query heads"]
    group = heads // n_kv_heads
    return [f"q head {h} · KV head {h // group}{head_notes[h] if head_notes else ''}" for h in range(heads)]


def _heatmaps(shown: _Shown, keys: list[tuple[str, str]], queries: list[tuple[str, str]],
              panel_cells: list[dict[str, str]], n: int, key_factor: int) -> list[dict]:
    """A heatmap per panel of its pooled matrix; in a window starting after 0, a [rows, 1] heatmap per
    panel of the weight outside it; last the colour bar's carrier."""
    key_names, query_names = [k for k, _ in keys], [q for q, _ in queries]
    start, stop, factor, own = shown.key_start, shown.key_stop, shown.factor, shown.own
    pooled = [pool_rows(m, n, factor, own) if key_factor > 1 else pool_attention(m[:, start:stop], n, factor, own)
              for m in shown.matrices]
    data = [{"type": "heatmap", "z": z,
             "x": key_names[1:] if start > 0 else key_names, "y": query_names, "coloraxis": "coloraxis",
             "hovertemplate": cell_hover(factor > 1), **cell} for z, cell in zip(pooled, panel_cells, strict=True)]
    if start > 0:
        data += [{"type": "heatmap", "z": o[:, None], "x": key_names[:1], "y": query_names, "coloraxis": "coloraxis",
                  "xgap": 3, "hovertemplate": outside_hover(start), **cell}
                 for o, cell in zip(shown.outside, panel_cells, strict=True)]
    data.append(colour_bar_carrier(panel_cells[0]))
    return data


def _titled(fig: go.Figure, step: int, title: str, geometry: PanelGeometry) -> go.Figure:
    """`fig` with the view's meta, `title` and the panels' margins and height."""
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


def zoom_window(zoom: int, n: int) -> tuple[int, int]:
    """The `ZOOM_TOKENS`-token window of n tokens drawn for a zoom from token `zoom` (kept inside 0..n)."""
    start = max(0, min(zoom, n - ZOOM_TOKENS))
    return start, min(start + ZOOM_TOKENS, n)
