"""Stacking attention blocks into one causal matrix, and the attention heatmaps drawn from it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from figure_traces import SMOLLM2, TINY, run_traces, step_attention

from explorer.figures.attention import (
    attention_figure,
    grid_columns,
    pool_attention,
    pooling_factor,
    stack_attention,
    thinned_ticks,
)
from explorer.figures.theme import visible_piece

TRACES = run_traces(TINY, decode_steps=2)  # 11 prompt tokens, then 2 decode steps: n = 13
BLOCKS = [step_attention(TINY, t)[1] for t in TRACES]
PIECES = [p for t in TRACES for p in t.input_pieces]


def heatmaps(fig):
    return [t for t in fig.data if t.type == "heatmap"]


def test_stack_puts_the_prefill_on_top_and_each_decode_row_below_it():
    stacked = stack_attention(BLOCKS)
    assert stacked.shape == (4, 13, 13) and stacked.dtype == np.float32
    lower = np.tril(np.ones((11, 11), dtype=bool))
    np.testing.assert_array_equal(stacked[:, :11, :11][:, lower], BLOCKS[0][:, lower])
    np.testing.assert_array_equal(stacked[:, 11, :12], BLOCKS[1][:, 0])
    np.testing.assert_array_equal(stacked[:, 12, :], BLOCKS[2][:, 0])
    above = np.triu(np.ones((13, 13), dtype=bool), k=1)
    assert np.isnan(stacked[:, above]).all()
    assert not np.isnan(stacked[:, ~above]).any()
    np.testing.assert_allclose(np.nansum(stacked, axis=-1), 1.0, atol=1e-5)


def test_a_narrower_decode_row_holds_the_last_keys():
    prefill = np.full((2, 3, 3), 1 / 3, dtype=np.float32)
    window_row = np.array([[[0.25, 0.75]], [[0.5, 0.5]]], dtype=np.float32)  # keys 2 and 3 of 4
    stacked = stack_attention([prefill, window_row])
    np.testing.assert_array_equal(stacked[:, 3, :], [[0, 0, 0.25, 0.75], [0, 0, 0.5, 0.5]])


@pytest.mark.parametrize("blocks", [
    [],
    [np.zeros((4, 3, 4), np.float32)],
    [np.zeros((4, 3, 3), np.float32), np.zeros((2, 1, 4), np.float32)],
    [np.zeros((4, 3, 3), np.float32), np.zeros((4, 2, 4), np.float32)],
    [np.zeros((4, 3, 3), np.float32), np.zeros((4, 1, 5), np.float32)],
])
def test_stack_refuses_inconsistent_shapes(blocks):
    with pytest.raises(ValueError):
        stack_attention(blocks)


def test_one_heatmap_per_query_head_with_its_probabilities():
    probs = stack_attention(BLOCKS)
    fig = attention_figure(probs, PIECES, 2, layer=1, step=2, new_rows=1)
    maps = heatmaps(fig)
    assert len(maps) == 4
    for head, trace in enumerate(maps):
        np.testing.assert_array_equal(np.asarray(trace.z), probs[head])
        assert trace.coloraxis == "coloraxis"
        assert list(trace.x)[4] == "#4 ␣is" and list(trace.y)[-1] == "#12 ."
    assert [a.text for a in fig.layout.annotations][:4] == [
        "q head 0 · KV head 0", "q head 1 · KV head 0", "q head 2 · KV head 1", "q head 3 · KV head 1"]
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)
    assert fig.layout.coloraxis.colorbar.title.text == "probability"
    assert "query %{y}" in maps[0].hovertemplate and "key %{x}" in maps[0].hovertemplate
    assert "probability %{z" in maps[0].hovertemplate
    assert fig.layout.meta == {"view": "attention", "step": 2}


def test_query_heads_sharing_a_kv_head_share_a_grid_row():
    traces = run_traces(SMOLLM2, [f" w{i}" for i in range(8)], 1)
    probs = stack_attention([step_attention(SMOLLM2, t)[0] for t in traces])
    fig = attention_figure(probs, [p for t in traces for p in t.input_pieces], 3, layer=0, step=1)
    domains = [tuple(fig.layout[f"yaxis{i if i > 1 else ''}"].domain) for i in range(1, 10)]
    assert len(set(domains)) == 3
    assert domains[0] == domains[1] == domains[2] != domains[3] == domains[5] != domains[6]
    assert fig.layout.annotations[4].text == "q head 4 · KV head 1"


def test_average_draws_one_panel_of_the_mean():
    probs = stack_attention(BLOCKS)
    fig = attention_figure(probs, PIECES, 2, layer=1, step=2, average=True)
    (only,) = heatmaps(fig)
    np.testing.assert_allclose(np.asarray(only.z), probs.mean(axis=0), atol=1e-7)
    assert "mean over 4 query heads" in [a.text for a in fig.layout.annotations]


def test_the_newest_rows_are_outlined_on_every_panel():
    fig = attention_figure(stack_attention(BLOCKS), PIECES, 2, layer=1, step=2, new_rows=2)
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 4
    assert {(s.y0, s.y1, s.x0, s.x1) for s in rects} == {(10.5, 12.5, -0.5, 12.5)}
    assert {s.yref for s in rects} == {"y", "y2", "y3", "y4"}
    plain = attention_figure(stack_attention(BLOCKS[:1]), PIECES[:11], 2, layer=1, step=0)
    assert not plain.layout.shapes


def test_a_decode_row_alone_is_drawn_against_all_keys():
    row = BLOCKS[2]
    fig = attention_figure(row, PIECES, 2, layer=1, step=2, new_rows=1)
    assert list(heatmaps(fig)[0].y) == ["#12 ."] and len(heatmaps(fig)[0].x) == 13
    assert (fig.layout.shapes[0].y0, fig.layout.shapes[0].y1) == (-0.5, 0.5)


def test_whitespace_is_visible_and_long_pieces_are_cut():
    assert visible_piece(" is") == "␣is"
    assert visible_piece("\n") == "↵"
    assert visible_piece("") == "∅"
    assert visible_piece("<|im_start|>assistant", 12) == "<|im_start|…"


def test_tick_labels_are_thinned_on_long_contexts():
    assert thinned_ticks(30, 40) == list(range(30))
    ticks = thinned_ticks(100, 40)
    assert len(ticks) <= 40 and ticks[0] == 0 and ticks[-1] == 99
    assert min(np.diff(ticks)) >= 3
    traces = run_traces(TINY, [f" t{i}" for i in range(60)], 1)
    probs = stack_attention([step_attention(TINY, t)[0] for t in traces])
    fig = attention_figure(probs, [p for t in traces for p in t.input_pieces], 2, layer=0, step=1)
    bottom = fig.layout.xaxis
    assert 10 <= len(bottom.tickvals) <= 40
    assert bottom.ticktext[0] == "␣t0" and bottom.tickvals[-1] == "#60 4"
    assert bottom.title.text == "key (token attended to)"
    assert fig.layout.yaxis.title.text == "query"


def test_a_long_context_is_pooled_into_blocks_that_keep_rows_summing_to_one():
    traces = run_traces(TINY, [f" t{i}" for i in range(199)], 1)
    probs = stack_attention([step_attention(TINY, t)[0] for t in traces])  # [4, 200, 200]
    factor = pooling_factor(200, 4)
    assert factor == 3  # 24,000 cells over 4 panels: 77 a side
    pooled = pool_attention(probs[0], 200, factor)
    assert pooled.shape == (67, 67)
    np.testing.assert_allclose(np.nansum(pooled, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(pooled[1, 0], probs[0, 3:6, 0:3].sum(axis=1).mean(), atol=1e-6)
    assert np.isnan(pooled[0, 1])  # queries 0..2 see none of keys 3..5
    fig = attention_figure(probs, [p for t in traces for p in t.input_pieces], 2, layer=0, step=1, new_rows=1)
    assert np.asarray(heatmaps(fig)[0].z).shape == (67, 67)
    assert "a cell spans 3 tokens" in fig.layout.title.text
    assert (fig.layout.shapes[0].y0, fig.layout.shapes[0].y1) == (65.5, 66.5)


def test_grid_columns_keep_gqa_groups_together():
    assert grid_columns(9, 3) == 3
    assert grid_columns(32, 4) == 4
    assert grid_columns(16, 2) == 4
    assert grid_columns(12, 1) == 4
    assert grid_columns(64, 8) == 4
    assert grid_columns(4, 4) == 4


def test_payload_of_nine_heads_over_forty_tokens_is_small_float32():
    traces = run_traces(SMOLLM2, [f" w{i}" for i in range(35)], 5)
    probs = stack_attention([step_attention(SMOLLM2, t)[3] for t in traces])
    fig = attention_figure(probs, [p for t in traces for p in t.input_pieces], 3, layer=3, step=5, new_rows=1)
    payload = fig.to_json()
    assert len(payload) < 150_000
    z = json.loads(payload)["data"][0]["z"]
    assert z["dtype"] == "f4" and "bdata" in z


@pytest.mark.parametrize(("probs", "pieces", "kv_heads", "new_rows"), [
    (np.zeros((4, 3), np.float32), ["a"] * 3, 2, 0),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 2, 2, 0),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 3, 3, 0),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 3, 2, 4),
])
def test_inconsistent_arguments_are_refused(probs, pieces, kv_heads, new_rows):
    with pytest.raises(ValueError):
        attention_figure(probs, pieces, kv_heads, layer=0, step=0, new_rows=new_rows)
