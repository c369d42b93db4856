"""The logit lens view: what each layer's residual stream would predict, read through the model's own
final norm and LM head (computed by the runner over the full vocabulary, `explorer.trace.LensRecord`).

Rows are the residual stream after the embedding and after each decoder layer, columns the context
positions (the prefill's, then one per decode step up to the one shown); each cell is coloured by a
statistic of its distribution and the hover gives its top 5. A cell is written with its top-1 token
where that token takes over, reading up a column (`written_cells`), and in the top row (the model's
own prediction): a run of layers agreeing on a token shows it once, where it starts. Plotly.js
draws each written cell as an SVG text of its own: in the app's page on a 2-core machine, a draw of
the embedded model's 31 x 32 cells took 0.31 s with every cell written, 0.17 s with the ~36% written
here, 0.08 s with none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from explorer.figures.theme import (
    TITLE_ASCENT_PX,
    TITLE_CHARS,
    TITLE_LINE_PX,
    TITLE_TOP_PX,
    base_layout,
    plain_label,
    set_layout,
    visible_piece,
    wrapped,
)
from explorer.trace import LensRecord

# What colours a cell: name -> (what the colour bar says, its unit).
LENS_STATS = {
    "top1": ("probability of the top-1 token", "p"),
    "next": ("probability of the token that follows", "p"),
    "entropy": ("entropy of the distribution", "bits"),
}
MAX_ROWS = 32  # rows drawn: deeper models keep the first and last and spread the others evenly
MAX_COLUMNS = 32  # columns drawn: the newest positions
CELL_CHARS = 6  # characters of a cell's top-1 token


@dataclass(frozen=True)
class LensColumns:
    """The lens of several steps side by side (the prefill's positions, then each decode step's).

    Attributes:
        positions: [C] context positions.
        next_ids: [C] the token that follows each position.
        top_ids: [L+1, C, k] int; top_probs: [L+1, C, k] float32; next_probs, entropy_bits: [L+1, C] float32.
    """

    positions: list[int]
    next_ids: list[int]
    top_ids: np.ndarray
    top_probs: np.ndarray
    next_probs: np.ndarray
    entropy_bits: np.ndarray

    @classmethod
    def join(cls, records: Sequence[LensRecord]) -> LensColumns:
        """The records' columns in order (the prefill's first)."""
        return cls([p for r in records for p in r.positions], [i for r in records for i in r.next_ids],
                   *(np.concatenate([getattr(r, name) for r in records], axis=1)
                     for name in ("top_ids", "top_probs", "next_probs", "entropy_bits")))

    def statistic(self, stat: str) -> np.ndarray:
        """[L+1, C] float32: the values of `stat` (a `LENS_STATS` key). Raises KeyError for another."""
        return {"top1": lambda: self.top_probs[..., 0], "next": lambda: self.next_probs,
                "entropy": lambda: self.entropy_bits}[stat]()


def shown_rows(n_rows: int, max_rows: int = MAX_ROWS) -> list[int]:
    """The row indices drawn: all of them up to `max_rows`, else `max_rows` spread evenly, always the
    first (the embedding) and the last (the model's output)."""
    if n_rows <= max_rows:
        return list(range(n_rows))
    return sorted({round(x) for x in np.linspace(0, n_rows - 1, max_rows)})


def row_label(row: int) -> str:
    """Row 0 is the embedding, row l the output of decoder layer l - 1 (layers counted from 0)."""
    return "embedding" if row == 0 else f"layer {row - 1}"


def first_top1_row(columns: LensColumns, column: int) -> int | None:
    """The first row whose top-1 token at `column` is the token that follows it; None if none is."""
    hits = np.flatnonzero(columns.top_ids[:, column, 0] == columns.next_ids[column])
    return int(hits[0]) if hits.size else None


def written_cells(top1: np.ndarray) -> np.ndarray:
    """[R, C] bool: the cells written with their top-1 token, from the shown rows' top-1 ids `top1`
    [R, C] int (bottom row first): the bottom and top rows, and every cell whose top-1 differs from
    the cell below it."""
    written = np.ones(top1.shape, dtype=bool)
    written[1:-1] = top1[1:-1] != top1[:-2]
    return written


def lens_figure(columns: LensColumns, pieces: Sequence[str], piece: Callable[[int], str], stat: str, step: int,
                first_position: int, ended_at: int | None = None) -> go.Figure:
    """The layers x positions heatmap.

    Args:
        columns: the lens of the steps up to the one shown.
        pieces: the n token pieces of the context (the input token at each position).
        piece: token id -> its text piece.
        stat: what colours a cell, a `LENS_STATS` key.
        step: the step shown (for the title and `layout.meta`).
        first_position: the prompt's first position the prefill's lens covers (a long prompt's lens
            covers its last positions only), said in the title when it is not 0.
        ended_at: in a batch, the step at which sequence 0 chose end-of-sequence (its lens stops there;
            the later steps fed it the pad id), said in the title; None while it runs.

    Returns:
        A figure with `layout.meta == {"view": "lens", "step": step}`: one heatmap (z [rows, columns]
        float32 of `stat`, text the top-1 token of each cell `written_cells` names and "" elsewhere,
        customdata each cell's hover text, headed by the hovertemplate).
    """
    rows = shown_rows(columns.top_ids.shape[0])
    cols = list(range(max(0, len(columns.positions) - MAX_COLUMNS), len(columns.positions)))
    values = columns.statistic(stat)[np.ix_(rows, cols)]
    top1 = columns.top_ids[np.ix_(rows, cols)][..., 0]
    written = written_cells(top1)
    text = [[plain_label(visible_piece(piece(int(token)), CELL_CHARS)) if shown else "" for token, shown in
             zip(row, shown_row, strict=True)] for row, shown_row in zip(top1, written, strict=True)]
    hover, hovertemplate = _hover(columns, rows, cols, piece)
    x = [f"{columns.positions[c]}: {plain_label(visible_piece(pieces[columns.positions[c]], 8))}" for c in cols]
    y = [row_label(r) for r in rows]
    label, unit = LENS_STATS[stat]
    probability = unit == "p"
    fig = go.Figure(data=[{
        "type": "heatmap", "z": values, "x": x, "y": y, "text": text, "texttemplate": "%{text}", "customdata": hover,
        "hovertemplate": hovertemplate, "colorscale": "Viridis", "reversescale": not probability,
        "zmin": 0, "zmax": 1 if probability else max(1.0, float(values.max())), "xgap": 1, "ygap": 1,
        "colorbar": {"title": {"text": unit}, "thickness": 12}, "textfont": {"size": 10},
    }])
    height = max(360, 40 + 16 * len(rows) + 120)
    title = f"Logit lens, step {step}: each layer's residual stream through the final norm and LM head; colour: {label}"
    notes = []
    if len(rows) < columns.top_ids.shape[0]:
        notes.append(f"{len(rows)} of {columns.top_ids.shape[0]} rows")
    if cols[0] > 0 or first_position > 0:
        notes.append(f"positions from {columns.positions[cols[0]]}")
    if ended_at is not None:
        notes.append(f"sequence 0 ended at step {ended_at}")
    if notes:
        title += f" ({', '.join(notes)})"
    lines = wrapped(plain_label(title).split(" "), TITLE_CHARS)  # no line under the modebar
    base_layout(fig, "lens", step, "<br>".join(lines), height=height)
    return set_layout(fig, xaxis={"title": {"text": "position: input token · each cell predicts the token after it; its top-1 is "
                                                     "written where it takes over (reading up) and in the top row"},
                                  "tickangle": -45, "type": "category"},
                      yaxis={"title": {"text": "residual stream after"}, "type": "category", "autorange": True},
                      margin={"l": 90, "r": 20, "t": 2 * TITLE_TOP_PX + TITLE_LINE_PX * len(lines) + 16, "b": 90},
                      # plotly.js anchors a "top" title of several lines by its first line's baseline
                      title={**fig.layout.title.to_plotly_json(), "yref": "container", "yanchor": "top",
                             "y": 1 - (TITLE_TOP_PX + TITLE_ASCENT_PX) / height})


def _hover(columns: LensColumns, rows: Sequence[int], cols: Sequence[int],
           piece: Callable[[int], str]) -> tuple[list[list[str]], str]:
    """The cells' hover texts and the template around them (its words are sent once, not per cell).

    Returns:
        customdata [rows][cols] str: the cell's top-k pieces with their probabilities, the probability
        of the token that follows the position and the entropy; and the hovertemplate that heads it.
    """
    k = columns.top_ids.shape[2]
    labels: dict[int, str] = {}

    def label(token_id: int) -> str:
        return labels.setdefault(token_id, plain_label(visible_piece(piece(token_id), 16)))

    def text(row: int, column: int) -> str:
        tops = "<br>".join(f"  {label(int(i))}  {p:.3f}"
                           for i, p in zip(columns.top_ids[row, column], columns.top_probs[row, column], strict=True))
        return (f"{tops}<br>next token {label(columns.next_ids[column])}: {columns.next_probs[row, column]:.3f}<br>"
                f"entropy {columns.entropy_bits[row, column]:.2f} bits")

    template = (f"%{{y}}, position %{{x}}<br>top {k} (computed over the full vocabulary):<br>"
                "%{customdata}<extra></extra>")
    return [[text(r, c) for c in cols] for r in rows], template
