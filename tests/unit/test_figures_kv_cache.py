"""The KV-cache figure from hand-built traces: the cache as positions x (layer, KV head), which step
wrote each column, a sliding window's evicted positions, pooling, bytes per position, the totals
against MHA, units.

Oracles are computed here from the model's dimensions and the run's construction (prompt length, one
token per decode step, the window transformers keeps), not read back from the figure's own helpers.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from figure_traces import SMOLLM2, TINY, kv_snapshot, run_traces

from explorer.figures.kv_bytes import byte_unit, bytes_per_position, bytes_text, shapes_text
from explorer.figures.kv_cache import TAIL_POSITIONS, cache_grid, kv_cache_figure
from explorer.trace import KVSnapshot, StepTrace

PROMPT = 20
DECODE = 5
TRACES = run_traces(SMOLLM2, [f" w{i}" for i in range(PROMPT)], DECODE)
SLIDING = dataclasses.replace(TINY, n_layers=4, layer_windows=(6, None, 6, None))


def kv_steps(spec, prompt: int, decode_steps: int, element_bytes: int = 4, shape_only: bool = False) -> list[StepTrace]:
    """The prefill of `prompt` tokens and `decode_steps` one-token steps, with only what the KV view
    reads (KV snapshots, context lengths, pieces): cheap at thousands of tokens."""
    def snapshots(context: int) -> list[KVSnapshot]:
        snaps = [kv_snapshot(spec, layer, context) for layer in range(spec.n_layers)]
        return [dataclasses.replace(s, key_bytes=math.prod(s.key_shape) * element_bytes,
                                    value_bytes=math.prod(s.value_shape) * element_bytes) for s in snaps]

    def step(index: int, pieces: list[str], context: int) -> StepTrace:
        return StepTrace(stage="prefill" if index == 0 else "decode", step_index=index,
                         input_ids=list(range(len(pieces))), input_pieces=pieces, context_length=context, ops=[],
                         kv=snapshots(context), attention=[], logits=None, sampling=None, shape_only=shape_only)

    return [step(0, [f" p{i}" for i in range(prompt)], prompt)] + [
        step(k, [f" d{k}"], prompt + k) for k in range(1, decode_steps + 1)]


def heatmap(fig):
    return next(t for t in fig.data if t.type == "heatmap")


def line(fig, name: str):
    return next(t for t in fig.data if t.type == "scatter" and t.name == name)


def outline(fig):
    return next(s for s in fig.layout.shapes if s.name == "newest columns")


def test_the_grid_has_one_column_per_position_and_one_row_per_layer_and_kv_head():
    fig = kv_cache_figure(TRACES, 9, DECODE)
    cells = heatmap(fig)
    z = np.asarray(cells.z)
    n = PROMPT + DECODE
    assert z.shape == (SMOLLM2.n_layers * SMOLLM2.n_kv_heads, n) == (90, 25)
    assert cells.y[0].startswith("layer 0 · KV head 0") and cells.y[1].startswith("layer 0 · KV head 1")
    assert cells.y[-1].startswith("layer 29 · KV head 2")
    assert list(fig.layout.yaxis.ticktext)[0] == "layer 0" and list(fig.layout.yaxis.ticktext)[-1] == "layer 29"
    # hover: the position, its token piece (whitespace made visible) and the step that wrote it
    assert cells.x[3] == "position 3 · token ␣w3 · written by the prefill"
    assert cells.x[-1] == f"position {n - 1} · token ␣is · written by step {DECODE}"
    assert TRACES[-1].input_pieces == [" is"] and fig.layout.xaxis.ticktext[3] == "␣w3"


def test_each_step_wrote_as_many_columns_as_it_added_positions():
    fig = kv_cache_figure(TRACES, 9, DECODE)
    z = np.asarray(heatmap(fig).z)
    added = np.diff([0] + [t.context_length for t in TRACES])
    assert added.tolist() == [PROMPT] + [1] * DECODE  # how the run was built: the prompt, then one token a step
    for row in z:  # full attention: every layer holds every position, each cell coded 1 + the step that wrote it
        assert [int((row == step + 1).sum()) for step in range(DECODE + 1)] == added.tolist()
    assert (z[:, :PROMPT] == 1).all() and (z[:, PROMPT:] == np.arange(2, DECODE + 2)).all()


def test_the_shown_steps_columns_are_outlined_over_every_row():
    n, rows = PROMPT + DECODE, 90
    box = outline(kv_cache_figure(TRACES, 9, DECODE))
    assert (box.x0, box.x1, box.y0, box.y1) == (n - 1 - 0.5, n - 0.5, -0.5, rows - 0.5)
    box = outline(kv_cache_figure(TRACES[:1], 9, 0))  # the prefill wrote all its columns at once
    assert (box.x0, box.x1) == (-0.5, PROMPT - 0.5)
    fig = kv_cache_figure(TRACES[:3], 9, 2)
    assert "step 2 wrote this column ↓" in [a.text for a in fig.layout.annotations]
    assert fig.layout.legend is not None and "written by step 2" in [t.name for t in fig.data]


def test_a_sliding_window_layer_shows_the_positions_it_no_longer_keeps_empty():
    traces = run_traces(SLIDING, decode_steps=4)
    n = traces[-1].context_length
    fig = kv_cache_figure(traces, 4, 4)
    z, held = np.asarray(heatmap(fig).z), np.asarray(heatmap(fig).customdata)
    heads = SLIDING.n_kv_heads
    for layer, window in enumerate(SLIDING.layer_windows):
        kept = n if window is None else window - 1  # transformers' DynamicSlidingWindowLayer keeps window - 1
        rows = slice(layer * heads, (layer + 1) * heads)
        assert (z[rows, : n - kept] == 0).all() and (held[rows, : n - kept] == 0).all(), layer
        assert (z[rows, n - kept:] > 0).all() and (held[rows, n - kept:] == 1).all(), layer
    assert n == 15 and "keeps the last 5 of 15 positions (sliding window)" in heatmap(fig).y[0]
    assert "not kept (sliding window)" in [t.name for t in fig.data]
    assert "not kept (sliding window)" not in [t.name for t in kv_cache_figure(TRACES, 9, DECODE).data]
    assert "[1, 2, 5, 8] in 2 layers, [1, 2, 15, 8] in 2 layers" in shapes_text(traces[-1].kv)


@pytest.mark.parametrize("spec", [SMOLLM2, dataclasses.replace(SMOLLM2, layer_windows=(512, None) * 15),
                                  dataclasses.replace(SMOLLM2, n_layers=80, n_kv_heads=8)],
                         ids=["full", "sliding", "deep"])
def test_a_long_context_is_pooled_keeping_every_position_and_the_newest_columns(spec):
    prompt, decode = 3_000, 6
    traces = kv_steps(spec, prompt, decode)
    n = prompt + decode
    fig = kv_cache_figure(traces, 9, decode)
    cells = heatmap(fig)
    z, held = np.asarray(cells.z), np.asarray(cells.customdata)
    rows = spec.n_layers * spec.n_kv_heads
    assert z.shape[0] == rows and z.shape[1] < n and z.size <= 48_000 + rows  # pooled, within the cell budget
    kept = [n if spec.window(layer) is None else spec.window(layer) - 1 for layer in range(spec.n_layers)]
    assert held.sum() == spec.n_kv_heads * sum(kept)  # pooling keeps every held position, no more
    # each column's positions, from its hover label: contiguous, covering 0 .. n-1 once
    spans = [(int(a), int(b)) for a, b in (_span(label) for label in cells.x)]
    assert spans[0][0] == 0 and spans[-1][1] == n - 1
    assert all(b0 + 1 == a1 for (_, b0), (a1, _) in zip(spans, spans[1:], strict=False))
    full_row = next(i for i in range(rows) if kept[i // spec.n_kv_heads] == n)
    assert held[full_row].tolist() == [b - a + 1 for a, b in spans]
    # the newest positions keep a column each: every decode step's column shows
    singles = next(i for i, (a, b) in enumerate(reversed(spans)) if a != b)
    assert singles == (TAIL_POSITIONS if spec.n_layers == 30 else 75 // 4)  # deep: a quarter of its 75 columns
    assert z[full_row, -decode:].tolist() == [k + 1 for k in range(1, decode + 1)]
    box = outline(fig)
    assert (box.x0, box.x1) == (len(spans) - 1.5, len(spans) - 0.5)
    assert "bins of" in fig.layout.xaxis.title.text
    assert len(fig.to_json()) < 300_000


def _span(label: str) -> tuple[str, str]:
    head = label.split(" · ")[0]
    if head.startswith("positions "):
        first, last = head.removeprefix("positions ").split(" ")[0].split("–")
        return first, last
    position = head.removeprefix("position ")
    return position, position


def test_bytes_per_position_is_two_times_layers_kv_heads_head_dim_and_element_size():
    for element_bytes, dtype in ((4, "float32"), (2, "16-bit")):
        traces = kv_steps(SMOLLM2, PROMPT, 2, element_bytes=element_bytes)
        expected = 2 * SMOLLM2.n_layers * SMOLLM2.n_kv_heads * SMOLLM2.head_dim * element_bytes
        kv = traces[-1].kv
        assert bytes_per_position(kv) == expected == sum((s.key_bytes + s.value_bytes) / s.key_shape[2] for s in kv)
        fig = kv_cache_figure(traces, 9, 2)
        assert fig.layout.title.text == (f"KV cache after step 2: {PROMPT + 2} positions × 30 layers × 3 KV heads; "
                                         f"{bytes_text(expected * (PROMPT + 2))}, {bytes_text(expected)} per position")
        notes = " ".join(a.text for a in fig.layout.annotations)
        assert "× 4 B = 45 KiB" in notes if element_bytes == 4 else "× 2 B = 22.5 KiB" in notes
        assert dtype in notes and "measured" in notes
    assert bytes_text(2 * 30 * 3 * 64 * 4) == "45 KiB"


def test_a_sliding_window_layer_counts_its_bytes_per_position_held():
    traces = run_traces(SLIDING, decode_steps=4)
    assert bytes_per_position(traces[-1].kv) == 2 * 4 * 2 * 8 * 4  # every layer: 2 x h_kv x d_h x 4 B a position


def test_the_running_total_is_measured_and_the_mha_line_computed_with_gqas_saving():
    fig = kv_cache_figure(TRACES, 9, DECODE)
    gqa, mha = line(fig, "GQA (this model), measured"), line(fig, "MHA of equal size, computed")
    unit, scale = byte_unit(max(sum(s.key_bytes + s.value_bytes for s in t.kv) * 3 for t in TRACES))
    expected = [30 * 2 * 3 * n * 64 * 4 for n in range(PROMPT, PROMPT + DECODE + 1)]
    assert list(gqa.x) == list(range(DECODE + 1))
    np.testing.assert_allclose(np.asarray(gqa.y) * scale, expected)
    np.testing.assert_allclose(np.asarray(mha.y), np.asarray(gqa.y) * 9 / 3)
    assert mha.line.dash == "dash" and gqa.line.dash == "solid"
    assert fig.layout.yaxis2.title.text == f"K + V ({unit})" and unit == "MiB"
    assert "this step added 45 KiB" in gqa.customdata[-1]
    saved = int((9 / 3 - 1) * expected[-1])
    assert f"GQA: ×3 smaller,<br>saves {bytes_text(saved)}" in [a.text for a in fig.layout.annotations]


def test_the_current_shapes_are_stated():
    fig = kv_cache_figure(TRACES[:4], 9, 3)
    notes = " ".join(a.text for a in fig.layout.annotations)
    assert f"K and V per layer: [1, 3, {PROMPT + 3}, 64] float32" in notes
    assert "MHA (" in notes and "computed" in notes


def test_shape_only_steps_draw_from_their_snapshots():
    traces = kv_steps(SMOLLM2, PROMPT, 2, shape_only=True)
    fig = kv_cache_figure(traces, 9, 2)
    assert np.asarray(heatmap(fig).z).shape == (90, PROMPT + 2)
    assert fig.layout.meta == {"view": "kv_cache", "step": 2}


def test_pieces_given_are_shown_escaped():
    pieces = ["<b>"] + [f"t{i}" for i in range(PROMPT + DECODE - 1)]
    cells = heatmap(kv_cache_figure(TRACES, 9, DECODE, pieces=pieces))
    assert cells.x[0] == "position 0 · token &lt;b&gt; · written by the prefill"


def test_meta_titles_and_payload():
    fig = kv_cache_figure(TRACES[:2], 9, 1)
    assert fig.layout.meta == {"view": "kv_cache", "step": 1}
    assert list(fig.layout.xaxis2.ticktext) == ["P", "1"]
    assert "step" in fig.layout.xaxis2.title.text and "position" in fig.layout.xaxis.title.text
    assert fig.layout.title.text.startswith("KV cache after step 1: 21 positions")
    assert kv_cache_figure(TRACES[:1], 9, 0).layout.title.text.startswith("KV cache after the prefill: 20 positions")
    assert fig.layout.height <= 600
    payload = kv_cache_figure(TRACES, 9, DECODE).to_json()
    assert len(payload) < 40_000 and json.loads(payload)["data"][0]["z"]["dtype"] == "u1"


def test_units_are_readable():
    assert byte_unit(512) == ("B", 1)
    assert byte_unit(3 * 2**20) == ("MiB", 2**20)
    assert bytes_text(812) == "812 B"
    assert bytes_text(3 * 2**20) == "3 MiB"
    assert bytes_text(1536) == "1.5 KiB"


def test_no_snapshot_or_a_shrinking_context_is_refused():
    with pytest.raises(ValueError):
        kv_cache_figure([], 9, 0)
    with pytest.raises(ValueError):
        kv_cache_figure([dataclasses.replace(TRACES[0], kv=[])], 9, 0)
    with pytest.raises(ValueError, match="never shrink"):
        cache_grid([TRACES[1], TRACES[0]])
