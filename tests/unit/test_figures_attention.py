"""Stacking attention blocks into one causal matrix, and the attention heatmaps drawn from it.

The oracles are numpy on the inputs: the drawn z equal the probabilities (or their pooled sums over
the token ranges the labels name), the colour at p is Blues at p ** 0.3 (plotly's own sampling), the
weight outside a zoom window is 1 - the window's row sums, and tick pitches are read back from the
layout's domains and margins.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from figure_traces import SMOLLM2, TINY, run_traces, step_attention
from plotly.colors import sample_colorscale, unlabel_rgb

from explorer.figures.attention import (
    attention_figure,
    grid_columns,
    outside_weight,
    pool_attention,
    pooling_factor,
    stack_attention,
)
from explorer.figures.attention_labels import (
    FIGURE_WIDTH_PX,
    TICK_FONT_MIN_PX,
    block_labels,
    thinned_ticks,
)
from explorer.figures.attention_style import GAMMA, power_colorscale
from explorer.figures.theme import PRESENTER_SCALE, TITLE_CHARS, presenter_style, visible_piece, visible_text

TRACES = run_traces(TINY, decode_steps=2)  # 11 prompt tokens, then 2 decode steps: n = 13
BLOCKS = [step_attention(TINY, t)[1] for t in TRACES]
PIECES = [p for t in TRACES for p in t.input_pieces]
RANGE = re.compile(r"#(\d+)(?:–(\d+) \((\d+) tokens\))?")


def heatmaps(fig):
    return [t for t in fig.data if t.type == "heatmap"]


def stacked(spec, prompt_tokens: int, decode_steps: int = 1, layer: int = 0) -> tuple[np.ndarray, list[str]]:
    """[h_q, n, n] float32 causal probabilities and the n pieces (" w0", " w1", ...; decode pieces after)."""
    traces = run_traces(spec, [f" w{i}" for i in range(prompt_tokens)], decode_steps)
    return (stack_attention([step_attention(spec, t)[layer] for t in traces]),
            [p for t in traces for p in t.input_pieces])


def token_range(category: str) -> range:
    """The absolute token positions a category names: "#4 ␣is" -> 4..4, "#30–59 (30 tokens)" -> 30..59."""
    match = RANGE.match(category)
    first, last = int(match[1]), int(match[2] or match[1])
    assert match[3] is None or int(match[3]) == last - first + 1
    return range(first, last + 1)


def panel_px(fig, axis: str) -> float:
    """A panel's drawn length along `axis` ("xaxis", "yaxis2", ...), from the layout at FIGURE_WIDTH_PX wide."""
    layout = fig.layout
    plot = (FIGURE_WIDTH_PX - layout.margin.l - layout.margin.r if axis.startswith("x")
            else layout.height - layout.margin.t - layout.margin.b)
    low, high = layout[axis].domain
    return plot * (high - low)


def rgb_at(colorscale, values: np.ndarray) -> np.ndarray:
    """[len(values), 3] the colours plotly.js draws for `values` on `colorscale` (linear between stops)."""
    stops = np.array([float(p) for p, _ in colorscale])
    colours = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for _, c in colorscale], float)
    return np.stack([np.interp(values, stops, colours[:, c]) for c in range(3)], axis=1)


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
        np.testing.assert_array_equal(np.asarray(trace.z), probs[head])  # the stored values, not their colour
        assert trace.coloraxis == "coloraxis"
        assert list(trace.x)[4] == "#4 ␣is" and list(trace.y)[-1] == "#12 ."
    assert [a.text for a in fig.layout.annotations][:4] == [
        "q head 0 · KV head 0", "q head 1 · KV head 0", "q head 2 · KV head 1", "q head 3 · KV head 1"]
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)
    assert "query %{y}" in maps[0].hovertemplate and "key %{x}" in maps[0].hovertemplate
    assert "probability %{z:.6g}" in maps[0].hovertemplate  # six significant digits of the float32 value
    assert fig.layout.meta == {"view": "attention", "step": 2}


def test_the_colour_is_p_to_the_power_gamma_and_the_colour_bar_reads_in_probabilities():
    p = np.array([0.0, 1e-4, 1e-3, 3e-3, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 1.0])
    scale = power_colorscale()
    expected = np.array([unlabel_rgb(c) for c in sample_colorscale("Blues", (p ** 0.3).tolist())], float)
    np.testing.assert_allclose(rgb_at(scale, p), expected, atol=2.0)  # of 255
    linear = np.array([unlabel_rgb(c) for c in sample_colorscale("Blues", [0.0, 0.001])], float)
    assert np.abs(linear[1] - linear[0]).max() < 1 < 20 < np.abs(rgb_at(scale, [0.001]) - rgb_at(scale, [0.0])).max()
    fig = attention_figure(stack_attention(BLOCKS), PIECES, 2, layer=1, step=2)
    assert fig.layout.coloraxis.colorscale == tuple(tuple(s) for s in scale)
    assert fig.layout.coloraxis.showscale is False
    bar_axis = fig.layout.coloraxis2  # the colour bar: the base scale, even in p ** GAMMA, as the panels' is in p
    np.testing.assert_allclose(rgb_at([(s, _hex(c)) for s, c in bar_axis.colorscale], p ** GAMMA), expected, atol=1.0)
    bar = bar_axis.colorbar
    assert list(bar.ticktext) == ["0", "0.001", "0.01", "0.1", "0.5", "1"]
    np.testing.assert_allclose(bar.tickvals, np.array([0, 0.001, 0.01, 0.1, 0.5, 1]) ** 0.3)
    assert "colour: p^0.3" in bar.title.text and "small weights show" in bar.title.text
    (carrier,) = [t for t in fig.data if t.type == "scatter"]
    assert carrier.marker.coloraxis == "coloraxis2" and carrier.hoverinfo == "skip"


def _hex(colour: str) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(round(v) for v in unlabel_rgb(colour))) if colour.startswith("rgb") else colour


def test_the_title_and_the_axes_say_what_the_figure_shows():
    fig = attention_figure(stack_attention(BLOCKS), PIECES, 2, layer=1, step=2, new_rows=1)
    title = visible_text(fig.layout.title.text).replace("\n", " ")  # read across its lines
    assert title.startswith("Attention in layer 1 at decode step 2: each row is a query token, how its weight spreads "
                            "over the key tokens it may see (causal: none to the right)")
    assert "h_q = 4 query heads, h_kv = 2 KV heads (GQA groups of g = 2)" in title
    prefill = attention_figure(stack_attention(BLOCKS[:1]), PIECES[:11], 2, layer=0, step=0)
    assert visible_text(prefill.layout.title.text).startswith("Attention in layer 0 at the prefill: each row")
    titles = {key: fig.layout[key].title.text for key in fig.layout.to_plotly_json()
              if key.startswith(("xaxis", "yaxis")) and fig.layout[key].title.text}
    assert titles == {"xaxis2": "key (source) token: the one attended to",  # under the panels' middle
                      "yaxis": "query (destination) token:<br>the one attending"}


def test_query_heads_sharing_a_kv_head_share_a_grid_row():
    probs, pieces = stacked(SMOLLM2, 8)
    fig = attention_figure(probs, pieces, 3, layer=0, step=1)
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


@pytest.mark.parametrize(("spec", "kv_heads", "average"), [(TINY, 2, False), (TINY, 2, True), (SMOLLM2, 3, True)])
def test_every_token_is_labelled_at_twenty_tokens(spec, kv_heads, average):
    probs, pieces = stacked(spec, 19)  # n = 20
    fig = attention_figure(probs, pieces, kv_heads, layer=0, step=1, new_rows=1, average=average)
    expected = [visible_piece(p) for p in pieces]
    bottom, left = fig.layout.xaxis, fig.layout.yaxis
    assert list(bottom.tickvals) == list(heatmaps(fig)[0].x) and list(bottom.ticktext) == expected
    assert list(left.tickvals) == list(heatmaps(fig)[0].y) and list(left.ticktext) == expected
    for axis, font in (("xaxis", bottom.tickfont.size), ("yaxis", left.tickfont.size)):
        assert TICK_FONT_MIN_PX <= font and panel_px(fig, axis) / 20 >= font + 1  # a line of text a cell


def test_where_rows_are_too_narrow_as_many_labels_as_fit_are_spread_evenly():
    probs, pieces = stacked(SMOLLM2, 19)  # 9 heads in three grid rows: ~120 px for 20 rows
    fig = attention_figure(probs, pieces, 3, layer=0, step=1, new_rows=1)
    assert list(fig.layout.xaxis7.ticktext) == [visible_piece(p) for p in pieces]  # the keys still all fit
    left = fig.layout.yaxis
    rows = list(heatmaps(fig)[0].y)
    ticks = [rows.index(v) for v in left.tickvals]
    pitch = panel_px(fig, "yaxis") / len(rows)
    stride = ticks[1] - ticks[0]
    assert ticks[0] == 0 and ticks[-1] == len(rows) - 1 and 1 < stride
    assert set(np.diff(ticks[:-1])) == {stride} and stride <= ticks[-1] - ticks[-2] < 2 * stride
    assert stride * pitch >= left.tickfont.size + 1 > (stride - 1) * pitch  # one label closer would not fit


def test_tick_labels_are_thinned_on_long_contexts():
    assert thinned_ticks(30, 40) == list(range(30))
    ticks = thinned_ticks(100, 40)
    assert len(ticks) <= 40 and ticks[0] == 0 and ticks[-1] == 99
    assert min(np.diff(ticks)) >= 3
    probs, pieces = stacked(TINY, 60)
    fig = attention_figure(probs, pieces, 2, layer=0, step=1)
    bottom = fig.layout.xaxis
    assert 10 <= len(bottom.tickvals) < 61
    assert bottom.ticktext[0] == "␣w0" and bottom.tickvals[-1] == "#60 4"
    pitch = panel_px(fig, "xaxis") / 61
    assert min(np.diff([list(heatmaps(fig)[0].x).index(v) for v in bottom.tickvals])) * pitch >= 11


def test_a_long_context_is_pooled_into_blocks_that_keep_rows_summing_to_one():
    probs, pieces = stacked(TINY, 199)  # [4, 200, 200]
    factor = pooling_factor(200, 4)
    assert factor == 3  # 24,000 cells over 4 panels: 77 a side
    pooled = pool_attention(probs[0], 200, factor)
    assert pooled.shape == (67, 67)
    np.testing.assert_allclose(np.nansum(pooled, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(pooled[1, 0], probs[0, 3:6, 0:3].sum(axis=1).mean(), atol=1e-6)
    assert np.isnan(pooled[0, 1])  # queries 0..2 see none of keys 3..5
    apart = pool_attention(probs[0], 200, factor, own_rows=1)  # the newest row a block of its own
    assert apart.shape == (68, 67)
    np.testing.assert_allclose(apart[-1], np.add.reduceat(probs[0, 199], np.arange(0, 200, 3)), atol=1e-6)
    np.testing.assert_allclose(apart[-2, 0], probs[0, 198, 0:3].sum(), atol=1e-6)  # 198 alone: 199 left
    fig = attention_figure(probs, pieces, 2, layer=0, step=1, new_rows=1)
    np.testing.assert_array_equal(np.asarray(heatmaps(fig)[0].z), apart)
    assert "a cell spans 3 tokens a side (the newest row alone)" in visible_text(fig.layout.title.text)
    assert (fig.layout.shapes[0].y0, fig.layout.shapes[0].y1) == (66.5, 67.5)


def test_pooled_cells_are_named_by_the_token_ranges_they_span_and_hold_their_mean_of_sums():
    probs, pieces = stacked(TINY, 199)  # n = 200, a cell 3 tokens a side
    fig = attention_figure(probs, pieces, 2, layer=0, step=1, new_rows=1)
    first = heatmaps(fig)[0]
    keys, queries = [token_range(c) for c in first.x], [token_range(c) for c in first.y]
    for ranges in (keys, queries):  # contiguous, covering every token once
        assert [t for r in ranges for t in r] == list(range(200)) and max(map(len, ranges)) == 3
    assert first.y[-1] == "#199 4" and len(queries[-1]) == 1  # the newest row: its own token
    assert fig.layout.yaxis.ticktext[-1] == "199 4" and "<|im" not in fig.layout.yaxis.ticktext[-1]
    assert fig.layout.xaxis.ticktext[0] == "0–2"
    z = np.asarray(first.z)
    masked = np.nan_to_num(probs[0])
    for i, rows in enumerate(queries[::7]):  # every 7th query block against every key block
        for j, cols in enumerate(keys):
            value = masked[np.ix_(rows, cols)].sum(axis=1).mean()
            if np.isnan(z[i * 7, j]):
                assert np.isnan(probs[0][np.ix_(rows, cols)]).all()
            else:
                np.testing.assert_allclose(z[i * 7, j], value, atol=1e-6)
    assert "summed over these keys" in first.hovertemplate and "mean over these queries" in first.hovertemplate
    assert "queries %{y}" in first.hovertemplate and "keys %{x}" in first.hovertemplate


def test_a_zoom_window_is_drawn_at_full_resolution_with_the_weight_outside_it():
    probs, pieces = stacked(TINY, 60)  # n = 61
    fig = attention_figure(probs, pieces, 2, layer=0, step=1, new_rows=1, window=(20, 44))
    maps = heatmaps(fig)
    assert len(maps) == 8  # four panels, then four columns of weight outside the window
    inside = np.nansum(probs[:, 20:44, 20:44], axis=-1)  # [h, 24]: each shown row's weight in the window
    for head in range(4):
        np.testing.assert_array_equal(np.asarray(maps[head].z), probs[head, 20:44, 20:44])
        outside = np.asarray(maps[4 + head].z)
        assert outside.shape == (24, 1) and list(maps[4 + head].x) == ["#0–19 (before the window)"]
        np.testing.assert_allclose(outside[:, 0], 1.0 - inside[head], atol=2e-6)
        np.testing.assert_allclose(outside[:, 0], np.nansum(probs[head, 20:44, :20], axis=-1), atol=1e-6)
    assert list(fig.layout.xaxis.categoryarray) == ["#0–19 (before the window)", *maps[0].x]
    assert fig.layout.xaxis.ticktext[0] == "outside 0–19" and "before the window" in maps[4].hovertemplate
    share = 1.0 - inside[:, -1]
    title = visible_text(fig.layout.title.text).replace("\n", " ")  # read across its lines
    assert (f"The window holds {1 - share.mean():.1%} of its last row's (#43 ␣w43) weight; "
            f"{share.mean():.1%} lies on keys 0–19 before it (mean of 4 heads; "
            f"per head {share.min():.1%}–{share.max():.1%}).") in title
    assert title.endswith(" · tokens 20-43 at full resolution")
    assert not fig.layout.shapes  # the newest row lies beyond the window


def test_a_zoom_window_at_the_end_outlines_the_newest_row_and_averages_the_weight_outside():
    probs, pieces = stacked(TINY, 60)
    fig = attention_figure(probs, pieces, 2, layer=0, step=1, new_rows=1, window=(37, 61), average=True)
    panel, column = heatmaps(fig)
    mean = probs.mean(axis=0)
    np.testing.assert_allclose(np.asarray(panel.z), mean[37:, 37:], atol=1e-7)
    np.testing.assert_allclose(np.asarray(column.z)[:, 0], 1.0 - np.nansum(mean[37:, 37:], axis=-1), atol=2e-6)
    held = np.nansum(mean[60, 37:])
    assert (f"The window holds {held:.1%} of the newest row's (#60 4) weight; {1 - held:.1%} lies on keys 0–36 "
            "before it (mean over heads).") in visible_text(fig.layout.title.text)
    (rect,) = fig.layout.shapes
    assert (rect.x0, rect.x1, rect.y0, rect.y1) == (-0.5, 24.5, 22.5, 23.5)  # the outside column included


def test_a_zoom_window_from_token_zero_has_nothing_outside():
    probs, pieces = stacked(TINY, 60)
    fig = attention_figure(probs, pieces, 2, layer=0, step=1, window=(0, 24))
    assert len(heatmaps(fig)) == 4 and fig.layout.xaxis.categoryarray is None
    assert "The window starts at token 0: it holds all of its last row's (#23 ␣w23) weight." in visible_text(
        fig.layout.title.text)


def test_outside_weight_sums_each_row_beyond_the_window():
    probs = np.array([[[0.5, 0.25, 0.25, np.nan], [0.1, 0.2, 0.3, 0.4]]], np.float32)  # [1, 2, 4]
    np.testing.assert_allclose(outside_weight(probs, 1, 3), [[0.5, 0.5]], atol=1e-7)
    assert outside_weight(probs, 0, 4).tolist() == [[0.0, 0.0]] and outside_weight(probs, 1, 3).dtype == np.float32


def test_block_labels_name_tokens_and_ranges_and_refuse_bad_blocks():
    pieces = ["<|im_start|>", "a", " b", "c", "d"]
    assert block_labels(pieces, np.array([0, 1, 2]), 3) == [("#0 &lt;|im_start|&gt;", "&lt;|im_start|&gt;"),
                                                          ("#1 a", "a"), ("#2 ␣b", "␣b")]
    assert block_labels(pieces, np.array([0, 3, 4]), 5) == [("#0–2 (3 tokens)", "0–2"), ("#3 c", "3 c"), ("#4 d", "4 d")]
    for starts, stop in (([], 3), ([1, 1], 3), ([2, 1], 3), ([0], 6)):
        with pytest.raises(ValueError):
            block_labels(pieces, np.array(starts, int), stop)


def test_grid_columns_keep_gqa_groups_together():
    assert grid_columns(9, 3) == 3
    assert grid_columns(32, 4) == 4
    assert grid_columns(16, 2) == 4
    assert grid_columns(12, 1) == 4
    assert grid_columns(64, 8) == 4
    assert grid_columns(4, 4) == 4


@pytest.mark.parametrize(("spec", "kv_heads", "kwargs"), [
    (SMOLLM2, 3, {}), (SMOLLM2, 3, {"average": True}), (SMOLLM2, 3, {"window": (10, 40)}), (TINY, 2, {})])
def test_the_figure_fits_a_laptop_screen(spec, kv_heads, kwargs):
    probs, pieces = stacked(spec, 40)
    fig = attention_figure(probs, pieces, kv_heads, layer=0, step=1, new_rows=1, **kwargs)
    assert fig.layout.height <= 640
    assert fig.layout.margin.t >= 10 + 22 * (fig.layout.title.text.count("<br>") + 1)  # room for every title line


def test_presenter_mode_wraps_the_title_shorter_and_labels_no_closer_than_its_text():
    probs, pieces = stacked(SMOLLM2, 60)
    normal = attention_figure(probs, pieces, 3, layer=0, step=1, new_rows=1)
    fig = presenter_style(attention_figure(probs, pieces, 3, layer=0, step=1, new_rows=1, presenter=True))
    assert fig.layout.meta == {"view": "attention", "step": 1} and fig.layout.height <= 1.5 * 640
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) > len(normal.layout.title.text.split("<br>"))
    assert all(len(visible_text(line)) <= TITLE_CHARS / PRESENTER_SCALE for line in lines)
    bottom = fig.layout.xaxis7
    keys = list(heatmaps(fig)[0].x)
    width = (FIGURE_WIDTH_PX - fig.layout.margin.l - fig.layout.margin.r) * np.diff(bottom.domain)[0]
    gaps = np.diff([keys.index(v) for v in bottom.tickvals])
    assert gaps.min() * width / len(keys) >= bottom.tickfont.size + 1  # the enlarged labels do not overlap
    assert len(bottom.tickvals) < len(normal.layout.xaxis7.tickvals)


def test_payload_of_nine_heads_over_forty_tokens_is_small_float32():
    traces = run_traces(SMOLLM2, [f" w{i}" for i in range(35)], 5)
    probs = stack_attention([step_attention(SMOLLM2, t)[3] for t in traces])
    fig = attention_figure(probs, [p for t in traces for p in t.input_pieces], 3, layer=3, step=5, new_rows=1)
    payload = fig.to_json()
    assert len(payload) < 150_000
    z = json.loads(payload)["data"][0]["z"]
    assert z["dtype"] == "f4" and "bdata" in z


def test_payload_of_nine_heads_over_2048_tokens_pooled_stays_under_500_kb():
    n = 2048
    row = np.arange(n, dtype=np.float32)
    one = np.where(row[None, :] <= row[:, None], 1.0 / (row[:, None] + 1.0), np.nan).astype(np.float32)
    probs = np.broadcast_to(one, (9, n, n))  # uniform causal rows, read-only: nothing is written back
    fig = attention_figure(probs, [f" w{i}" for i in range(n)], 3, layer=3, step=5, new_rows=1)
    assert len(fig.to_json()) < 500_000 and fig.layout.height <= 640
    np.testing.assert_allclose(np.nansum(np.asarray(heatmaps(fig)[0].z), axis=1), 1.0, atol=1e-4)


@pytest.mark.parametrize(("probs", "pieces", "kv_heads", "new_rows", "window"), [
    (np.zeros((4, 3), np.float32), ["a"] * 3, 2, 0, None),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 2, 2, 0, None),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 3, 3, 0, None),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 3, 2, 4, None),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 3, 2, 0, (2, 2)),
    (np.zeros((4, 3, 3), np.float32), ["a"] * 3, 2, 0, (1, 4)),
    (np.zeros((4, 1, 3), np.float32), ["a"] * 3, 2, 0, (0, 2)),  # the one query row (token 2) lies outside
])
def test_inconsistent_arguments_are_refused(probs, pieces, kv_heads, new_rows, window):
    with pytest.raises(ValueError):
        attention_figure(probs, pieces, kv_heads, layer=0, step=0, new_rows=new_rows, window=window)
