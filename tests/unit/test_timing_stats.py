"""Wall times over a step's layers: the median and spread of hand-built OpRecords equal numpy's, the
stops outside the layers are one measurement, times under the noise floor are flagged, and a
shape-only step has no times."""

from __future__ import annotations

import gc
import time
import weakref
from dataclasses import replace

import numpy as np
import pytest
from figure_traces import SMOLLM2, run_traces

from explorer.analysis.timing_stats import (
    NOISE_FLOOR_MS,
    is_noise,
    ms_number,
    step_timings,
    stop_timing,
    timing_description,
    timing_stats,
    timing_text,
)
from explorer.trace import OpRecord

LAYERS = SMOLLM2.n_layers  # 30


@pytest.fixture(scope="module")
def trace():
    """A SmolLM2-shaped prefill whose every stop has a random wall time (ms), heavy-tailed like a busy
    machine's: most near 0.1 ms, a few tens of times longer."""
    prefill = run_traces(SMOLLM2, decode_steps=0)[0]
    rng = np.random.default_rng(7)
    walls = rng.lognormal(np.log(0.1), 1.0, size=len(prefill.ops))
    ops = [replace(op, wall_ms=None if op.wall_ms is None else float(wall))
           for op, wall in zip(prefill.ops, walls, strict=True)]
    return replace(prefill, ops=ops)


def layer_walls(trace, stop: str) -> np.ndarray:
    """The L measurements of `stop` ("attn.q_proj"), one per layer, as numpy float64."""
    return np.array([trace.op(f"layers.{i}.{stop}").wall_ms for i in range(LAYERS)])


@pytest.mark.parametrize("stop", ["attn.q_proj", "attn.softmax", "mlp.down_proj", "attn.kv_cache_write"])
def test_a_layer_stop_is_the_median_and_spread_of_its_layers(trace, stop):
    walls = layer_walls(trace, stop)
    for layer in (0, 17, LAYERS - 1):  # every layer's row shows the same summary
        timing = stop_timing(trace, trace.op(f"layers.{layer}.{stop}"))
        assert timing.stop == stop and timing.count == LAYERS and timing.repeated
        assert timing.median_ms == pytest.approx(np.median(walls), rel=1e-12)
        assert timing.p10_ms == pytest.approx(np.percentile(walls, 10), rel=1e-12)
        assert timing.p90_ms == pytest.approx(np.percentile(walls, 90), rel=1e-12)
        assert (timing.min_ms, timing.max_ms) == (walls.min(), walls.max())
    assert timing.p10_ms <= timing.median_ms <= timing.p90_ms


def test_the_stops_outside_the_layers_are_one_measurement(trace):
    for name in ("tokenize", "embed", "final_norm", "lm_head", "sample", "detokenize"):
        op = trace.op(name)
        timing = stop_timing(trace, op)
        assert timing.count == 1 and not timing.repeated
        assert timing.median_ms == timing.min_ms == timing.max_ms == timing.p10_ms == op.wall_ms
        assert "one measurement" in timing_description(timing)


def test_layers_whose_stop_has_other_shapes_are_summarised_apart():
    """A sliding-window layer's scores are a shorter row than a global layer's: not the same work."""
    ops = [OpRecord(f"layers.{i}.attn.scores", "batched_gemm", i, [[1, 4, 1, 8]],
                    [[1, 4, 1, 6 if i % 3 else 40]], "float32", float(i + 1)) for i in range(9)]
    prefill = replace(run_traces(decode_steps=0)[0], ops=ops)
    local, full = stop_timing(prefill, ops[1]), stop_timing(prefill, ops[0])
    assert local.count == 6 and local.median_ms == np.median([2, 3, 5, 6, 8, 9])
    assert full.count == 3 and full.median_ms == 4.0  # layers 0, 3, 6: 1, 4, 7 ms


def test_a_view_has_no_timing_and_a_shape_only_step_none_at_all(trace):
    assert stop_timing(trace, trace.op("layers.0.attn.split_heads")) is None
    assert timing_text(None) == "view" and timing_description(None) == "no kernel (a view)"
    meta = replace(trace, shape_only=True, device="meta")
    assert step_timings(meta) == {}
    assert stop_timing(meta, meta.op("layers.0.attn.q_proj")) is None


def test_times_below_the_timers_resolution_and_overhead_are_flagged_as_noise(trace):
    assert NOISE_FLOOR_MS >= time.get_clock_info("perf_counter").resolution * 1e3
    assert NOISE_FLOOR_MS == 0.01  # the hooks' own cost between two clock readings dominates
    tiny = [OpRecord(f"layers.{i}.attn.gqa_expand", "broadcast", i, [[1]], [[1]], "float32", 0.004 + 1e-4 * i)
            for i in range(5)]
    timing = timing_stats("attn.gqa_expand", [op.wall_ms for op in tiny])
    assert timing.noise and is_noise(0.0099) and not is_noise(0.01)
    assert timing_text(timing) == "<0.01 noise"
    assert "below 0.01 ms" in timing_description(timing) and "noise" in timing_description(timing)
    above = stop_timing(trace, trace.op("layers.0.mlp.down_proj"))
    assert not above.noise and "noise" not in timing_text(above)


def test_table_text_and_hover_sentence(trace):
    q_proj = trace.op("layers.3.attn.q_proj")
    timing = stop_timing(trace, q_proj)
    assert timing_text(timing) == f"{timing.median_ms:.2f} [{timing.p10_ms:.2f}-{timing.p90_ms:.2f}]"
    sentence = timing_description(timing, q_proj.wall_ms, 3)
    assert sentence.startswith(f"median of {LAYERS} layers {timing.median_ms:.2f} ms (p10-p90 ")
    assert f"range {timing.min_ms:.2f}-{timing.max_ms:.2f} ms" in sentence
    assert sentence.endswith(f"layer 3 itself {q_proj.wall_ms:.2f} ms")


def test_no_measurement_is_refused():
    with pytest.raises(ValueError, match="No measurements"):
        timing_stats("attn.q_proj", [])


def test_a_traces_timings_are_computed_once_and_do_not_keep_it_alive(trace):
    assert step_timings(trace) is step_timings(trace)
    other = replace(trace)
    assert step_timings(other) == step_timings(trace) and step_timings(other) is not step_timings(trace)
    watched = weakref.ref(other)
    del other
    gc.collect()
    assert watched() is None


def test_numbers_keep_a_time_under_the_floor_distinguishable():
    assert [ms_number(x) for x in (113.4, 7.966, 0.0123, 0.0099, 0.0065, 0.0)] == [
        "113", "7.97", "0.01", "0.0099", "0.0065", "0.0000"]
