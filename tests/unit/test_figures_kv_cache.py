"""The KV-cache figure from hand-built traces: totals, per-layer bars, the MHA comparison, units."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from figure_traces import SMOLLM2, TINY, run_traces

from explorer.figures.kv_cache import (
    byte_unit,
    bytes_text,
    kv_cache_figure,
    shapes_text,
)

TRACES = run_traces(SMOLLM2, [f" w{i}" for i in range(35)], 3)
SLIDING = dataclasses.replace(TINY, n_layers=4, layer_windows=(6, None, 6, None))


def line(fig, name: str):
    return next(t for t in fig.data if t.type == "scatter" and t.name == name)


def bars(fig, name: str):
    return next(t for t in fig.data if t.type == "bar" and t.name == name)


def test_total_line_is_the_sum_of_k_and_v_bytes_of_every_layer_per_step():
    fig = kv_cache_figure(TRACES, 9, 3)
    unit, scale = byte_unit(max(sum(s.key_bytes + s.value_bytes for s in t.kv) * 3 for t in TRACES))
    assert unit == "MiB"
    expected = [sum(s.key_bytes + s.value_bytes for s in t.kv) for t in TRACES]
    assert expected[0] == 30 * 2 * 3 * 35 * 64 * 4
    gqa = line(fig, "GQA (this model)")
    assert list(gqa.x) == [0, 1, 2, 3]
    np.testing.assert_allclose(np.asarray(gqa.y) * scale, expected)
    assert fig.layout.yaxis.title.text == "K + V (MiB)"
    assert f"after step 3: {bytes_text(expected[-1])} in 30 layers" in fig.layout.title.text
    assert bytes_text(expected[-1]) == "1.67 MiB"


def test_mha_line_is_gqa_times_the_group_size_and_dashed_with_the_saving():
    fig = kv_cache_figure(TRACES, 9, 3)
    gqa, mha = line(fig, "GQA (this model)"), line(fig, "MHA of equal size")
    np.testing.assert_allclose(np.asarray(mha.y), np.asarray(gqa.y) * 9 / 3)
    assert mha.line.dash == "dash" and gqa.line.dash == "solid"
    saved = (9 / 3 - 1) * sum(s.key_bytes + s.value_bytes for s in TRACES[-1].kv)
    assert f"GQA: ×3 smaller, saves {bytes_text(int(saved))}" in [a.text for a in fig.layout.annotations]


def test_per_layer_bars_are_each_layers_k_and_v_at_the_current_step():
    traces = run_traces(SLIDING, decode_steps=4)
    fig = kv_cache_figure(traces, 4, 4)
    keys, values = bars(fig, "K per layer"), bars(fig, "V per layer")
    unit, scale = byte_unit(max(s.key_bytes + s.value_bytes for s in traces[-1].kv))
    assert list(keys.x) == [0, 1, 2, 3]
    np.testing.assert_allclose(np.asarray(keys.y) * scale, [s.key_bytes for s in traces[-1].kv])
    np.testing.assert_allclose(np.asarray(values.y) * scale, [s.value_bytes for s in traces[-1].kv])
    assert keys.y[0] < keys.y[1]  # the sliding-window layer holds fewer positions
    assert fig.layout.yaxis2.title.text == f"bytes per layer ({unit})"
    assert fig.layout.barmode == "stack"
    assert "[1, 2, 5, 8] in 2 layers, [1, 2, 15, 8] in 2 layers" in shapes_text(traces[-1].kv)


def test_the_current_shapes_are_stated():
    fig = kv_cache_figure(TRACES, 9, 3)
    assert "K and V per layer: [1, 3, 38, 64] float32" in [a.text for a in fig.layout.annotations][-1]


def test_meta_marker_and_step_labels():
    fig = kv_cache_figure(TRACES[:2], 9, 1)
    assert fig.layout.meta == {"view": "kv_cache", "step": 1}
    assert list(fig.layout.xaxis.ticktext) == ["prefill", "1"]
    assert "step" in fig.layout.xaxis.title.text and fig.layout.xaxis2.title.text == "layer"


def test_units_are_readable():
    assert byte_unit(512) == ("B", 1)
    assert byte_unit(3 * 2**20) == ("MiB", 2**20)
    assert bytes_text(812) == "812 B"
    assert bytes_text(3 * 2**20) == "3 MiB"
    assert bytes_text(1536) == "1.5 KiB"


def test_no_snapshot_is_refused():
    with pytest.raises(ValueError):
        kv_cache_figure([], 9, 0)
