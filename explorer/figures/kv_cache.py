"""The KV-cache view: the cache drawn as a grid of the positions it holds, beside what it weighs.

Left, the cache itself: one column per cached token position (0 .. n-1), one row per (layer, KV
head), so a SmolLM2-sized model is 30 x 3 = 90 rows, grouped by layer. A cell is the K and V
vectors (d_h values each) of that position in that head. Its colour says which step wrote it: the
prefill (blue) wrote its T columns at once, every decode step (orange) one more column in every
row; the columns of the step shown are outlined. A sliding-window layer holds only its last
positions: the ones it no longer keeps are grey. A long context is pooled into column bins of f
positions (the hover names each bin's token range), all but its last `TAIL_POSITIONS`, which keep
one column each so that the decode steps' columns stay visible.

Right: the measured K + V bytes of all layers after each step, against an MHA model of the same
size (h_q KV heads per layer, computed), so GQA's saving stays visible (that panel and the bytes
arithmetic: `explorer.figures.kv_bytes`). The title gives the bytes per position
(2 x L x h_kv x d_h x bytes per element) and the total.

Everything comes from the steps' `KVSnapshot`s (the real cache tensors' shapes and bytes) and their
context lengths, so shape-only runs (no values) draw it too.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from explorer.figures.dims import coloured
from explorer.figures.kv_bytes import (
    byte_unit,
    bytes_per_position,
    bytes_text,
    mha_bytes,
    per_position_text,
    position_bytes,
    saving_note,
    shapes_text,
    total_bytes,
    totals_traces,
)
from explorer.figures.theme import (
    DECODE_COLOUR,
    PREFILL_COLOUR,
    base_layout,
    plain_label,
    set_layout,
    subplot_grid,
    visible_piece,
)
from explorer.journey import step_label
from explorer.trace import KVSnapshot, StepTrace

NOT_HELD_COLOUR = "#e8e8e8"  # a position a sliding-window layer no longer keeps
NEW_OUTLINE_COLOUR = "#000000"
MAX_COLUMNS = 512  # columns before pooling: ~1.5 px each in the grid's ~800 px at 1280 px
POOLED_COLUMNS = 288  # columns once pooled: 256 bins and the tail, which keeps ~1/9 of the width
MAX_CELLS = 48_000  # grid cells per figure (a uint8 code and a uint8 count each): ~130 KB of base64
MIN_COLUMNS = 64  # a very deep model (many rows) still gets this many column bins
TAIL_POSITIONS = 32  # the newest positions keep one column each when the rest is pooled
MAX_PIECE_CHARS = 10
GAP_COLUMNS = 120  # up to this many columns a 1 px gap shows each column on its own
HEIGHT = 580  # px: the whole figure, inside a 1280x720 screen below the page's controls
GRID_PX = 330  # px: the grid's height (rows share it; thin rows for deep models)
ROW_LABEL_PX = 12  # room one layer label needs on the grid's y axis


@dataclass(frozen=True)
class CacheGrid:
    """The cache as cells: rows (layer, KV head), columns bins of positions: `factor` positions each
    before `full_from`, one position each from there on.

    Attributes:
        writer: [rows, bins] uint8 (uint16 past 254 decode steps): 1 + the step index (1 = the prefill,
            k + 1 = decode step k) that wrote the newest position the cell still holds; 0 where the cell
            holds none (a sliding-window layer's positions it no longer keeps). Never negative: plotly's
            JSON escapes the "/" that base64 writes for 0xFF bytes as 6 characters.
        held: [rows, bins] uint8 (uint16 for bins over 255 positions): positions the cell holds.
        starts: [bins] int64: the first position of each bin (0, f, 2f, ..., then full_from,
            full_from + 1, ..., n - 1).
        stops: [bins] int64: one past the last position of each bin (the next bin's start; n for the last).
        factor: f, positions per pooled bin (1: one column per position everywhere).
        full_from: the first position drawn one column per position (0 when nothing is pooled).
        n: the context length (positions written so far).
        rows: (layer, KV head) per row, layer by layer.
        kept: per layer, the number of positions its cache holds (its key_shape[2], at most n).
        writers: [n] int64: the step that wrote each position.
    """

    writer: np.ndarray
    held: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    factor: int
    full_from: int
    n: int
    rows: list[tuple[int, int]]
    kept: list[int]
    writers: np.ndarray


def kv_cache_figure(traces: list[StepTrace], n_heads: int, step: int, pieces: list[str] | None = None) -> go.Figure:
    """The KV cache after the shown step as positions x (layer, KV head), and its bytes over the steps.

    Args:
        traces: the prefill, then the decode steps up to and including the shown one (traces[-1]),
            each with its `KVSnapshot`s (key_shape [B, h_kv, kv_len, d_h], bytes measured from the
            cache tensors) and its context length n.
        n_heads: h_q, query heads; an MHA model of equal size keeps h_q KV heads per layer, so its
            cache is the GQA cache x h_q / h_kv (h_kv read from each layer's key_shape[1]).
        step: the step shown (0 = prefill), for `layout.meta`.
        pieces: the n token pieces (position order), for the hover and the ticks; None (or a list
            that is not n long) takes the traces' input pieces (the prefill's, then each decode step's).

    Returns:
        A figure with `layout.meta == {"view": "kv_cache", "step": step}`: a heatmap (z: the
        `CacheGrid.writer` codes [rows, bins] uint8, customdata: positions held [rows, bins]), the
        shown step's columns outlined (a rect shape named "newest columns"), layer separators, the
        legend's colour keys (empty scatter traces), and on the right the measured GQA total and the
        computed MHA total after each step (scatter traces, bytes / unit).

    Raises:
        ValueError: no traces, a step without a KV snapshot, a cache of 0 positions, or context lengths
            that shrink from one step to the next.
    """
    if not traces or any(not t.kv for t in traces):
        raise ValueError("The KV-cache view needs steps that each have a KV snapshot.")
    grid = cache_grid(traces)
    current = traces[-1]
    pieces = _pieces(traces, grid.n) if pieces is None or len(pieces) != grid.n else pieces
    totals = [total_bytes(t.kv) for t in traces]
    mha_totals = [mha_bytes(t.kv, n_heads) for t in traces]
    layout, cells = subplot_grid(["", "K + V after each step"], rows=1, cols=2,
                                 column_widths=[0.73, 0.27], horizontal_spacing=0.08)
    data = [(trace, 1) for trace in _grid_traces(grid, current, pieces, layout)]
    data += [(trace, 2) for trace in totals_traces(traces, totals, mha_totals, layout)]
    layout["annotations"] += [saving_note(current.step_index, totals[-1], mha_totals[-1],
                                           byte_unit(max(mha_totals))[1]), _subtitle(traces, grid, n_heads)]
    outline, label = _new_outline(grid, traces)
    layout["shapes"] = _layer_lines(grid) + outline
    layout["annotations"] += label
    layout.update(hovermode="closest", plot_bgcolor="#ffffff", legend={
        "orientation": "h", "x": 0, "xanchor": "left", "y": -0.30, "yanchor": "top", "traceorder": "normal",
        "font": {"size": 12}})
    fig = go.Figure(data=[{**trace, **cells[1, col]} for trace, col in data], layout=layout)
    base_layout(fig, "kv_cache", step, _title(current, grid), height=HEIGHT)
    return set_layout(fig, title={**fig.layout.title.to_plotly_json(), "y": 1 - 10 / HEIGHT, "yanchor": "top"},
                      margin={"l": 70, "r": 20, "t": 112, "b": 120})


def cache_grid(traces: list[StepTrace], max_columns: int = MAX_COLUMNS, max_cells: int = MAX_CELLS) -> CacheGrid:
    """The last step's cache as a grid of (layer, KV head) rows and position bins.

    Step k wrote positions [n_(k-1), n_k) (n_k its context length, n_(-1) = 0); a layer whose cache
    holds kv_len < n positions (key_shape[2], a sliding window) holds the last kv_len of them. Where n
    positions are more columns than `max_columns` or `max_cells` / rows allow (at least `MIN_COLUMNS`),
    the last `TAIL_POSITIONS` (at most a quarter of the columns) keep a column each and the others
    are pooled into bins aligned on
    positions 0, f, 2f, ..., f the fewest positions per bin that fit `POOLED_COLUMNS` columns in all
    (or fewer, as the limits ask).

    Args:
        traces: the steps in order, the first the prefill; the grid shows the last one's cache.
        max_columns: columns (bins) at most.
        max_cells: rows x columns at most (unless that leaves fewer than `MIN_COLUMNS` columns).

    Raises:
        ValueError: no traces, no KV snapshot in the last step, n = 0, or context lengths that shrink.
    """
    if not traces or not traces[-1].kv:
        raise ValueError("The KV-cache view needs at least one step with a KV snapshot.")
    ends = np.array([t.context_length for t in traces], np.int64)
    if ends[-1] < 1 or (np.diff(ends) < 0).any():
        raise ValueError(f"Context lengths must be at least 1 and never shrink, got {ends.tolist()}.")
    n = int(ends[-1])
    steps = np.array([t.step_index for t in traces], np.int64)
    writers = steps[np.searchsorted(ends, np.arange(n), side="right")]
    kv = traces[-1].kv
    kept = [min(max(snap.key_shape[2], 0), n) for snap in kv]
    rows = [(snap.layer, head) for snap in kv for head in range(snap.key_shape[1])]
    columns = min(max_columns, max(MIN_COLUMNS, max_cells // max(1, len(rows))))
    if n <= columns:
        factor, full_from, starts = 1, 0, np.arange(n, dtype=np.int64)
    else:
        columns = min(columns, POOLED_COLUMNS)
        full_from = n - min(TAIL_POSITIONS, columns // 4)
        factor = math.ceil(full_from / (columns - (n - full_from)))
        starts = np.concatenate([np.arange(0, full_from, factor), np.arange(full_from, n)]).astype(np.int64)
    stops = np.append(starts[1:], n)
    first_kept = np.repeat([n - k for k in kept], [snap.key_shape[1] for snap in kv])[:, None]  # [rows, 1]
    held = np.clip(stops[None, :] - np.maximum(starts[None, :], first_kept), 0, None)
    writer = np.where(held > 0, writers[stops - 1][None, :] + 1, 0)
    return CacheGrid(writer=writer.astype(np.uint8 if writer.max() <= 255 else np.uint16),
                     held=held.astype(np.uint8 if factor <= 255 else np.uint16), starts=starts, stops=stops,
                     factor=factor, full_from=full_from, n=n, rows=rows, kept=kept, writers=writers)


def _grid_traces(grid: CacheGrid, current: StepTrace, pieces: list[str], layout: dict) -> list[dict]:
    """The cache heatmap, the legend's colour keys, and the grid's axes (column 1)."""
    labels = _column_labels(grid, pieces)
    row_names = _row_labels(grid, current.kv)
    top = max(int(grid.writers[-1]) + 1, 2)
    # writer codes: 0 not held (grey), 1 the prefill (blue), 2.. a decode step (orange)
    colours = [[0.0, NOT_HELD_COLOUR], [0.5 / top, NOT_HELD_COLOUR], [0.5 / top, PREFILL_COLOUR],
               [1.5 / top, PREFILL_COLOUR], [1.5 / top, DECODE_COLOUR], [1.0, DECODE_COLOUR]]
    gap = 1 if grid.factor == 1 and grid.n <= GAP_COLUMNS else 0
    cell = ("a cell: K and V of one position in one KV head" if grid.factor == 1 else
            f"bins of {grid.factor} positions, then the last {grid.n - grid.full_from} one column each")
    heatmap = {"type": "heatmap", "z": grid.writer, "customdata": grid.held, "x": [name for name, _ in labels],
               "y": row_names, "zmin": 0, "zmax": top, "colorscale": colours, "showscale": False,
               "xgap": gap, "ygap": _row_gap(grid), "name": "cache",
               "hovertemplate": "%{x}<br>%{y}<br>%{customdata} of the cell's positions held in the cache"
                                "<extra></extra>"}
    keys = [("prefill wrote", PREFILL_COLOUR, "square"), ("a decode step wrote", DECODE_COLOUR, "square")]
    if any(k < grid.n for k in grid.kept):
        keys.append(("not kept (sliding window)", NOT_HELD_COLOUR, "square"))
    keys.append((f"written by {_step_name(current.step_index)}", NEW_OUTLINE_COLOUR, "square-open"))
    legend = [{"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": name, "hoverinfo": "skip",
               "marker": {"color": colour, "symbol": symbol, "size": 12,
                          "line": {"color": NEW_OUTLINE_COLOUR if symbol == "square-open" else colour, "width": 2}}}
              for name, colour, symbol in keys]
    ticks = _thinned(len(labels), 36)
    layout["xaxis"].update(title={"text": f"cached position (token) · {cell}", "standoff": 4},
                           tickmode="array", tickvals=[labels[i][0] for i in ticks],
                           ticktext=[labels[i][1] for i in ticks], tickangle=-60, tickfont={"size": 10},
                           showgrid=False, zeroline=False)
    layer_ticks = _layer_ticks(grid, row_names)
    layout["yaxis"].update(title={"text": "layer (one row per KV head)", "standoff": 2}, autorange="reversed",
                           tickmode="array", tickvals=[row_names[i] for i, _ in layer_ticks],
                           ticktext=[text for _, text in layer_ticks], tickfont={"size": 10}, showgrid=False)
    return [heatmap, *legend]


def _column_labels(grid: CacheGrid, pieces: list[str]) -> list[tuple[str, str]]:
    """(hover category, tick text) per column: its position(s), first piece and the step(s) that wrote it."""
    labels = []
    for start, stop in zip(grid.starts.tolist(), grid.stops.tolist(), strict=True):
        piece = plain_label(visible_piece(pieces[start], MAX_PIECE_CHARS))
        wrote = sorted(set(grid.writers[start:stop].tolist()))
        by = ", ".join(_step_name(s) for s in wrote) if len(wrote) <= 3 else (
            f"{_step_name(wrote[0])} .. {_step_name(wrote[-1])}")
        if stop - start == 1:
            labels.append((f"position {start} · token {piece} · written by {by}", piece))
        else:
            labels.append((f"positions {start}–{stop - 1} ({stop - start}) · tokens {piece}… · written by {by}",
                           f"{piece}…"))
    return labels


def _step_name(step: int) -> str:
    return "the prefill" if step == 0 else f"step {step}"


def _row_labels(grid: CacheGrid, kv: list[KVSnapshot]) -> list[str]:
    """One unique category per row: its layer, KV head, and what one cell of it holds."""
    names = []
    for snap, kept in zip(kv, grid.kept, strict=True):
        batch, heads, _, head_dim = snap.key_shape
        cell_bytes = position_bytes(snap) // max(1, heads)
        holds = (f" · keeps the last {kept} of {grid.n} positions (sliding window)" if kept < grid.n else "")
        per_cell = (f"K, V: 2 × {head_dim} values{f' × B = {batch}' if batch != 1 else ''}"
                    f" = {bytes_text(cell_bytes)} per position")
        names += [f"layer {snap.layer} · KV head {head}{holds}<br>{per_cell}" for head in range(heads)]
    return names


def _layer_ticks(grid: CacheGrid, row_names: list[str]) -> list[tuple[int, str]]:
    """(row index, "layer l") at each layer's middle row, thinned to what `GRID_PX` has room for,
    always the first and the last layer."""
    firsts: dict[int, int] = {}
    counts: Counter[int] = Counter()
    for index, (layer, _) in enumerate(grid.rows):
        firsts.setdefault(layer, index)
        counts[layer] += 1
    layers = list(firsts)
    chosen = _thinned(len(layers), max(2, GRID_PX // ROW_LABEL_PX))
    return [(firsts[layers[i]] + (counts[layers[i]] - 1) // 2, f"layer {layers[i]}") for i in chosen]


def _row_gap(grid: CacheGrid) -> int:
    """1 px between rows where rows are at least 6 px high (each KV head its own row), else none."""
    return 1 if GRID_PX / max(1, len(grid.rows)) >= 6 else 0


def _layer_lines(grid: CacheGrid) -> list[dict]:
    """White lines between the layers' row groups (where a layer has more than one KV head and its
    group is at least 6 px high), and a dotted line where the pooled bins end and the
    one-column-per-position tail begins."""
    bounds = [index for index in range(1, len(grid.rows)) if grid.rows[index][0] != grid.rows[index - 1][0]]
    width = 3 if _row_gap(grid) else 1.5
    grouped = len(bounds) < len(grid.rows) - 1 and GRID_PX / (len(bounds) + 1) >= 6
    lines = [] if not grouped else [
        {"type": "line", "xref": "x", "yref": "y", "x0": -0.5, "x1": len(grid.starts) - 0.5, "y0": b - 0.5,
         "y1": b - 0.5, "line": {"color": "#ffffff", "width": width}, "layer": "above"} for b in bounds]
    if grid.full_from:
        tail = int(np.searchsorted(grid.starts, grid.full_from)) - 0.5
        lines.append({"type": "line", "xref": "x", "yref": "y domain", "x0": tail, "x1": tail, "y0": 0, "y1": 1,
                      "line": {"color": "#333333", "width": 1.5, "dash": "dot"}, "layer": "above",
                      "name": "pooled | one column per position"})
    return lines


def _new_columns(grid: CacheGrid, traces: list[StepTrace]) -> tuple[int, int]:
    """The first and last column holding a position the shown step wrote (n_(k-1) .. n_k - 1)."""
    first_new = traces[-2].context_length if len(traces) > 1 else 0
    first = int(np.searchsorted(grid.starts, min(first_new, grid.n - 1), side="right")) - 1
    return first, len(grid.starts) - 1


def _new_outline(grid: CacheGrid, traces: list[StepTrace]) -> tuple[list[dict], list[dict]]:
    """A rectangle around the columns the shown step wrote, all rows (a shape), and its label above."""
    first, last = _new_columns(grid, traces)
    current = traces[-1]
    written = current.context_length - (traces[-2].context_length if len(traces) > 1 else 0)
    what = "column" if written == 1 else f"{written} columns"
    rect = {"type": "rect", "xref": "x", "yref": "y", "x0": first - 0.5, "x1": last + 0.5, "y0": -0.5,
            "y1": len(grid.rows) - 0.5, "line": {"color": NEW_OUTLINE_COLOUR, "width": 2},
            "fillcolor": "rgba(0,0,0,0)", "name": "newest columns", "layer": "above"}
    label = {"text": f"{_step_name(current.step_index)} wrote {'this' if written == 1 else 'these'} {what} ↓",
             "xref": "x", "yref": "y domain", "x": last + 0.5, "y": 1, "xanchor": "right", "yanchor": "bottom",
             "showarrow": False, "font": {"size": 12}}
    return [rect], [label]



def _title(current: StepTrace, grid: CacheGrid) -> str:
    """`KV cache after step 3: 38 positions × 30 layers × 3 KV heads; 1.67 MiB, 45 KiB per position`."""
    kv = current.kv
    heads = Counter(snap.key_shape[1] for snap in kv)
    heads_text = f"{next(iter(heads))} KV heads" if len(heads) == 1 else "KV heads per layer"
    shown = "the prefill" if current.stage == "prefill" else step_label(current)
    return (f"KV cache after {shown}: {grid.n} positions × {len(kv)} layers × {heads_text}; "
            f"{bytes_text(total_bytes(kv))}, {bytes_text(bytes_per_position(kv))} per position")


def _subtitle(traces: list[StepTrace], grid: CacheGrid, n_heads: int) -> dict:
    """Three lines above the grid: what the step wrote (and, pooled, what a column spans), bytes per
    position as a product of the shapes, and the shapes."""
    current = traces[-1]
    if current.stage == "prefill":
        what = f"The prefill wrote all {current.context_length} columns at once: K and V of every layer and KV head."
    else:
        new = current.context_length - (traces[-2].context_length if len(traces) > 1 else 0)
        what = ("Each decode step writes one column: K and V of every layer and KV head." if new == 1
                else f"This step wrote {new} columns: K and V of every layer and KV head.")
    if grid.full_from:
        what += (f" Left of the dotted line a column pools {grid.factor} positions, right of it the last "
                 f"{grid.n - grid.full_from} have one each.")
    return {"xref": "paper", "yref": "paper", "x": 0, "y": 1, "yshift": 20, "xanchor": "left", "yanchor": "bottom",
            "showarrow": False, "font": {"size": 12, "color": "#555555"}, "align": "left",
            "text": f'<span style="color:#222222">{what}</span><br>{per_position_text(current.kv)}<br>'
                    f"{shapes_text(current.kv)} · measured from the cache tensors; "
                    f"MHA ({coloured('h_q')} = {n_heads} KV heads per layer) computed"}



def _thinned(count: int, max_ticks: int) -> list[int]:
    """At most `max_ticks` (>= 2) evenly spaced indices of `count` labels, the first and the last among them."""
    if count <= max_ticks:
        return list(range(count))
    stride = math.ceil((count - 1) / (max(max_ticks, 2) - 1))
    ticks = list(range(0, count - 1, stride))
    if count - 1 - ticks[-1] < stride:  # too close to the last label to stay legible
        ticks.pop()
    return [*ticks, count - 1]


def _pieces(traces: list[StepTrace], n: int) -> list[str]:
    """The steps' input pieces in position order, or "" for each position where they do not add up to n."""
    pieces = [piece for t in traces for piece in t.input_pieces]
    return pieces if len(pieces) == n else [""] * n
