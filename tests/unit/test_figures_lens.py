"""The logit lens figure from a hand-built run: cells, colours, hover and thinning."""

from __future__ import annotations

import re

import numpy as np
import pytest
from figure_traces import hand_run

from explorer.figures.lens import CELL_CHARS, LensColumns, first_top1_row, shown_rows, written_cells
from explorer.figures.theme import plain_label, visible_piece
from explorer.figures.view_types import LensData, ViewOptions
from explorer.figures.views import fig_lens
from explorer.trace import LensRecord


def _lenses(run, step: int) -> tuple:
    return tuple(run.lens(index) for index in range(step + 1))


@pytest.mark.parametrize("stat", ["top1", "next", "entropy"])
def test_each_cell_is_its_top1_token_coloured_by_the_chosen_statistic(stat):
    run, _ = hand_run(decode_steps=2)
    fig = fig_lens(LensData(run, lens=_lenses(run, 2)), ViewOptions(2, 0, False, "h100-sxm", lens_stat=stat))
    heatmap = fig.data[0]
    prefill, *decodes = _lenses(run, 2)
    assert fig.layout.meta == {"view": "lens", "step": 2}
    assert len(heatmap.x) == len(prefill.positions) + 2 and list(heatmap.y) == ["embedding", "layer 0", "layer 1"]
    expected = {"top1": lambda r: r.top_probs[..., 0], "next": lambda r: r.next_probs, "entropy": lambda r: r.entropy_bits}
    np.testing.assert_array_equal(heatmap.z, np.concatenate([expected[stat](r) for r in (prefill, *decodes)], axis=1))
    top1 = np.concatenate([r.top_ids[..., 0] for r in (prefill, *decodes)], axis=1)
    for row, col in np.ndindex(top1.shape):
        written = row in (0, top1.shape[0] - 1) or top1[row, col] != top1[row - 1, col]
        piece = plain_label(visible_piece(run.piece(int(top1[row, col])), CELL_CHARS))
        assert heatmap.text[row][col] == (piece if written else "")
    last = decodes[-1]
    hover = _hover_text(heatmap, 1, -1)
    for token_id, prob in zip(last.top_ids[1, 0], last.top_probs[1, 0], strict=True):
        assert f"  {run.piece(int(token_id))}  {prob:.3f}<br>" in hover
    assert hover.startswith(f"layer 0, position {heatmap.x[-1]}<br>")
    assert hover.endswith(f"<br>next token {run.piece(last.next_ids[0])}: {last.next_probs[1, 0]:.3f}<br>"
                          f"entropy {last.entropy_bits[1, 0]:.2f} bits")


def _hover_text(heatmap, row: int, column: int) -> str:
    """What Plotly's hover shows for a cell: its hovertemplate filled from the cell's customdata."""
    values = {"x": heatmap.x[column], "y": heatmap.y[row], "customdata": heatmap.customdata[row][column]}
    text = re.sub(r"%\{(\w+)\}", lambda m: values[m[1]], heatmap.hovertemplate)
    return text.removesuffix("<extra></extra>")


def test_a_token_is_written_where_it_takes_over_reading_up_and_in_the_top_row():
    top1 = np.array([[1, 2], [1, 3], [4, 3], [4, 3]])  # [rows from the embedding up, positions]
    np.testing.assert_array_equal(written_cells(top1), [[1, 1], [0, 1], [1, 0], [1, 1]])
    np.testing.assert_array_equal(written_cells(np.array([[5, 5]])), [[1, 1]])  # one row: it is the top row


def test_the_prefill_shows_its_positions_only():
    run, _ = hand_run(decode_steps=2)
    heatmap = fig_lens(LensData(run, lens=_lenses(run, 0)), ViewOptions(0, 0, False, "h100-sxm")).data[0]
    assert len(heatmap.x) == len(run.steps[0].input_ids)


def test_deep_models_are_thinned_keeping_the_first_and_last_rows():
    rows = shown_rows(81, 32)
    assert rows[0] == 0 and rows[-1] == 80 and len(rows) == 32 and rows == sorted(set(rows))
    assert shown_rows(31, 32) == list(range(31))


def test_the_first_row_naming_the_next_token():
    top = np.array([[[5]], [[7]], [[9]], [[7]]])  # [rows 4, positions 1, k 1]
    ones, zeros = np.ones((4, 1, 1), np.float32), np.zeros((4, 1), np.float32)
    assert first_top1_row(LensColumns.join([LensRecord([0], [7], top, ones, zeros, zeros, 1.0)]), 0) == 1
    assert first_top1_row(LensColumns.join([LensRecord([0], [3], top, ones, zeros, zeros, 1.0)]), 0) is None
