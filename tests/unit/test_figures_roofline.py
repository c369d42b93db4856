"""The roofline figure from hand-built prefill and decode traces of small odd-sized models."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from explorer.analysis.costs import step_costs, totals_by_op
from explorer.analysis.hardware import Hardware, get_hardware, hardware_from_dict
from explorer.analysis.measured import trace_costs
from explorer.analysis.precision import Precision
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.roofline import step_roofline
from explorer.analysis.spec import ModelSpec
from explorer.errors import ConfigError
from explorer.families import traced_family
from explorer.figures.roofline import roofline_figure
from explorer.stops import stop_table
from explorer.trace import OpRecord, StepTrace

LLAMA = ModelSpec.from_hf_config({
    "model_type": "llama", "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 37, "vocab_size": 97,
})
PHI3 = ModelSpec.from_hf_config({
    "model_type": "phi3", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "intermediate_size": 37, "vocab_size": 97,
})
H100 = get_hardware("h100-sxm")
PROMPT_TOKENS, DECODE_CONTEXT = 11, 14
LLAMA_GEMMS = {"attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
               "mlp.down_proj", "lm_head"}


def draw_roofline(spec, prefill, decode, hardware, step, measured=False):
    """`roofline_figure` of the prefill's and the decode step's costs (`trace_costs`)."""
    stages = [trace_costs(spec, trace) for trace in (prefill, decode) if trace is not None]
    return roofline_figure(stages, hardware, step, measured=measured)


def make_trace(spec: ModelSpec, stage: str, dtype: str = "float32") -> StepTrace:
    """Every stop of the family, wall time 0.01 ms * (1 + layer), none for views."""
    tokens, context = (PROMPT_TOKENS, PROMPT_TOKENS) if stage == "prefill" else (1, DECODE_CONTEXT)
    ops = []
    for name, kind, layer in stop_table(traced_family(spec.family), spec.n_layers, stage):
        wall_ms = None if kind in ("reshape", "broadcast") else 0.01 * (1 + (layer or 0))
        rows = 1 if name == "lm_head" else tokens  # the runner's LM head takes the last position only
        inputs = [[1, tokens]] if name == "embed" else [[1, rows, spec.hidden_size]]
        ops.append(OpRecord(name, kind, layer, inputs, [[1, rows, spec.hidden_size]], dtype, wall_ms))
    return StepTrace(stage=stage, step_index=0 if stage == "prefill" else 3, input_ids=[1] * tokens,
                     input_pieces=["a"] * tokens, context_length=context, ops=ops, kv=[], attention=[],
                     logits=None, sampling=None, device="cpu")


def trace(fig, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, [t.name for t in fig.data]
    return matches[0]


def expected_costs(spec: ModelSpec, step: Step, dtype: str = "fp32"):
    options = CostOptions(precision=Precision(dtype, dtype, dtype))
    return [c for c in totals_by_op(step_costs(spec, step, options)) if c.flops > 0]


@pytest.fixture(scope="module")
def figure():
    return draw_roofline(LLAMA, make_trace(LLAMA, "prefill"), make_trace(LLAMA, "decode"), H100, 3)


@pytest.mark.parametrize("stage, step", [("prefill", Step.prefill(PROMPT_TOKENS)),
                                         ("decode", Step.decode(DECODE_CONTEXT))])
def test_one_point_per_operator_at_its_analytic_intensity(figure, stage, step):
    points = trace(figure, f"{stage} analytic")
    costs = expected_costs(LLAMA, step)
    assert list(points.customdata) == [c.name for c in costs]
    assert points.x.dtype == np.float32 and points.y.dtype == np.float32
    np.testing.assert_allclose(points.x, [c.arithmetic_intensity for c in costs], rtol=1e-6)
    peak, bandwidth = 66.9e12, 3.35e12  # H100 SXM fp32 (the traces are float32)
    attainable = [min(peak, c.arithmetic_intensity * bandwidth) / 1e12 for c in costs]
    np.testing.assert_allclose(points.y, attainable, rtol=1e-6)
    assert LLAMA_GEMMS <= set(points.customdata)


def test_hover_gives_flops_bytes_intensity_bound_and_time(figure):
    decode = trace(figure, "decode analytic")
    q_proj = list(decode.customdata).index("attn.q_proj")
    hover = decode.hovertext[q_proj]
    flops = 3 * 2 * 32 * 32  # 3 layers, one row, d x h_q*d_h
    assert f"{flops / 1e3:.3g} kFLOP" in hover
    assert "FLOP/byte" in hover and "memory-bound" in hover and "µs" in hover


def test_roof_is_min_of_peak_and_slope_with_the_ridge_point_marked(figure):
    roof = trace(figure, "roofline")
    x = roof.x.astype(np.float64)
    np.testing.assert_allclose(roof.y, np.minimum(66.9e12, x * 3.35e12) / 1e12, rtol=1e-6)
    ridge = trace(figure, "ridge point")
    assert ridge.x[0] == pytest.approx(H100.ridge_point("fp32"), rel=1e-6)
    assert ridge.y[0] == pytest.approx(66.9, rel=1e-6)
    assert any(a.text == "ridge 20 FLOP/byte" for a in figure.layout.annotations)


def test_bf16_traces_use_the_bf16_ridge_point():
    fig = draw_roofline(LLAMA, make_trace(LLAMA, "prefill", "bfloat16"), None, H100, 0)
    assert trace(fig, "ridge point").x[0] == pytest.approx(H100.ridge_point("bf16"), rel=1e-6)
    assert any(a.text == "ridge 295 FLOP/byte" for a in fig.layout.annotations)
    costs = expected_costs(LLAMA, Step.prefill(PROMPT_TOKENS), "bf16")
    np.testing.assert_allclose(trace(fig, "prefill analytic").x, [c.arithmetic_intensity for c in costs], rtol=1e-6)


def test_fused_projections_of_phi3_each_get_a_point():
    fig = draw_roofline(PHI3, make_trace(PHI3, "prefill"), make_trace(PHI3, "decode"), H100, 1)
    for stage in ("prefill", "decode"):
        ops = set(trace(fig, f"{stage} analytic").customdata)
        assert {"attn.qkv_proj", "attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj", "lm_head"} <= ops
        assert "attn.q_proj" not in ops


def test_measured_points_only_when_asked(figure):
    assert not [t for t in figure.data if "measured" in t.name]
    fig = draw_roofline(LLAMA, make_trace(LLAMA, "prefill"), make_trace(LLAMA, "decode"), H100, 3, measured=True)
    decode = trace(fig, "decode measured")
    assert trace(fig, "prefill measured").marker.symbol == "circle-open"
    gate = list(decode.customdata).index("mlp.gate_proj")
    flops = 3 * 2 * 32 * 37
    wall_s = (0.01 + 0.02 + 0.03) / 1e3  # layers 0, 1, 2
    assert decode.y[gate] == pytest.approx(flops / wall_s / 1e12, rel=1e-6)
    assert decode.x[gate] == pytest.approx(trace(fig, "decode analytic").x[gate], rel=1e-6)


def test_every_operator_has_its_time_lower_bound(figure):
    bars = trace(figure, "decode time")
    expected = step_roofline(LLAMA, Step.decode(DECODE_CONTEXT), H100, CostOptions(precision=Precision("fp32",
                             "fp32", "fp32")))
    assert list(bars.y) == [p.cost.name for p in expected.points]
    assert {"embed", "attn.kv_cache_write"} <= set(bars.y)  # no FLOPs: not on the roofline, but here
    np.testing.assert_allclose(bars.x, [p.time_lower_bound_s * 1e6 for p in expected.points], rtol=1e-6)


def test_title_states_the_memory_bound_share_decode_first(figure):
    options = CostOptions(precision=Precision("fp32", "fp32", "fp32"))
    decode = step_roofline(LLAMA, Step.decode(DECODE_CONTEXT), H100, options)
    title = figure.layout.title.text
    assert title.startswith("Time lower bound: decode ≥ ")
    assert f"{decode.memory_bound_fraction:.0%} memory-bound; attention {decode.attention_fraction:.0%}" in title
    assert "<br>prefill ≥ " in title


def test_decode_none_draws_the_prefill_alone():
    fig = draw_roofline(LLAMA, make_trace(LLAMA, "prefill"), None, H100, 0)
    assert sorted(t.name for t in fig.data) == ["prefill analytic", "prefill time", "ridge point", "roofline"]
    assert fig.layout.meta == {"view": "roofline", "step": 0}


def test_axes_are_log_with_units_and_meta_marks_the_view(figure):
    assert figure.layout.meta == {"view": "roofline", "step": 3}
    assert (figure.layout.xaxis.type, figure.layout.yaxis.type, figure.layout.xaxis2.type) == ("log",) * 3
    assert figure.layout.xaxis.title.text == "arithmetic intensity (FLOP/byte)"
    assert figure.layout.yaxis.title.text == "attainable FLOP/s (TFLOP/s)"
    assert figure.layout.xaxis2.title.text == "time lower bound (µs)"


def test_a_machine_without_a_rate_for_the_traces_dtype_raises():
    bf16_only = Hardware(key="bf16-only", name="bf16 only", memory_bytes=1e9, memory_bandwidth_bytes_per_s=1e12,
                         dense_flops_per_s={"bf16": 1e14})
    with pytest.raises(ConfigError, match="fp32"):
        draw_roofline(LLAMA, make_trace(LLAMA, "prefill"), None, bf16_only, 0)


def test_measured_points_follow_new_wall_times_and_another_machine():
    prefill, decode = make_trace(LLAMA, "prefill"), make_trace(LLAMA, "decode")
    first = draw_roofline(LLAMA, prefill, decode, H100, 3, measured=True)
    slower = dataclasses.replace(decode, ops=[dataclasses.replace(op, wall_ms=op.wall_ms and op.wall_ms * 2)
                                              for op in decode.ops])
    second = draw_roofline(LLAMA, prefill, slower, H100, 3, measured=True)
    np.testing.assert_allclose(trace(second, "decode measured").y, trace(first, "decode measured").y / 2, rtol=1e-6)
    np.testing.assert_array_equal(trace(second, "prefill measured").y, trace(first, "prefill measured").y)
    a100 = get_hardware("a100-80gb")
    other = draw_roofline(LLAMA, prefill, decode, a100, 3)
    costs = expected_costs(LLAMA, Step.decode(DECODE_CONTEXT))
    peak = a100.peak_flops_per_s("fp32")[0]
    attainable = [min(peak, c.arithmetic_intensity * a100.memory_bandwidth_bytes_per_s) for c in costs]
    scale = 1e12 if peak >= 1e12 else 1e9
    np.testing.assert_allclose(trace(other, "decode analytic").y, np.array(attainable) / scale, rtol=1e-6)


def test_a_measured_overhead_is_a_third_roof_and_each_point_says_its_share_of_the_bound():
    machine = dataclasses.replace(H100, op_overhead_s=5e-6, cache_bandwidth_bytes_per_s=3 * H100.memory_bandwidth_bytes_per_s)
    prefill, decode = make_trace(LLAMA, "prefill"), make_trace(LLAMA, "decode")
    fig = draw_roofline(LLAMA, prefill, decode, machine, 3, measured=True)
    ceiling, costs = trace(fig, "decode overhead ceiling"), trace_costs(LLAMA, decode)
    scale = 1e12  # the axis is in TFLOP/s
    for name, y in zip(ceiling.customdata, ceiling.y, strict=True):
        cost = next(c for c, _ in costs.measured if c.name == name)
        launches = sum(1 for op in decode.ops if (op.name == name or op.name.endswith("." + name)) and op.wall_ms)
        assert launches == costs.launches[name] == (1 if name in ("lm_head", "final_norm", "embed") else LLAMA.n_layers)
        assert y == pytest.approx(cost.flops / (launches * 5e-6) / scale, rel=1e-5)
    q_proj = list(trace(fig, "decode measured").customdata).index("attn.q_proj")
    hover = trace(fig, "decode measured").hovertext[q_proj]
    assert "lower bound " in hover and ": measured ×" in hover and "of the bandwidth" in hover
    measured_time = trace(fig, "decode measured time")
    wall_s = next(s for c, s in costs.measured if c.name == "attn.q_proj")
    assert measured_time.x[list(measured_time.y).index("attn.q_proj")] == pytest.approx(wall_s * 1e6, rel=1e-5)
    cache = trace(fig, "cache roof")
    assert cache.y[0] / cache.x[0] == pytest.approx(3 * H100.memory_bandwidth_bytes_per_s / scale, rel=1e-5)
    assert not [t for t in draw_roofline(LLAMA, prefill, decode, H100, 3, measured=True).data
                if t.name.endswith(("overhead ceiling", "cache roof"))]  # a datasheet entry has neither


def test_the_datasheet_roofs_and_those_measured_here_are_drawn_together_with_their_sources():
    measured_here = "measured here by torch on NVIDIA H100 80GB HBM3 (cuda:0), CUDA events"
    probed = hardware_from_dict("this-machine", {
        "name": "This machine (NVIDIA H100 80GB HBM3, measured)", "memory_bytes": [80e9, "torch"],
        "memory_bandwidth_bytes_per_s": [2.9e12, measured_here + ": copy"],
        "op_overhead_s": [8e-6, measured_here + ": nn.Linear(1, 1)"],
        "dense_flops_per_s": {"bf16": [700e12, measured_here + ": bf16 matmul"],
                              "fp32": [50e12, measured_here + ": fp32 matmul"]}})
    prefill, decode = make_trace(LLAMA, "prefill"), make_trace(LLAMA, "decode")
    stages = [trace_costs(LLAMA, t) for t in (prefill, decode)]
    fig = roofline_figure(stages, H100, 3, measured=True, measured_roofs=probed)
    datasheet, here = trace(fig, "roofline"), trace(fig, "measured roofline")
    np.testing.assert_allclose(datasheet.y, np.minimum(66.9e12, datasheet.x.astype(np.float64) * 3.35e12) / 1e12,
                               rtol=1e-6)  # the traces are float32: the fp32 roofs
    np.testing.assert_allclose(here.y, np.minimum(50e12, here.x.astype(np.float64) * 2.9e12) / 1e12, rtol=1e-6)
    assert here.line.dash == "dash" and here.showlegend is not False and measured_here in here.hovertext[0]
    assert trace(fig, "measured ridge point").x[0] == pytest.approx(50e12 / 2.9e12, rel=1e-6)
    assert (here.x[0], here.x[-1]) == (datasheet.x[0], datasheet.x[-1])  # both span the axis
    labels = {a.name: a for a in fig.layout.annotations if a.name}
    assert labels["measured roofs"].text == "measured here: 50 TFLOP/s (fp32), 2.9 TB/s"
    sources = labels["conventions"].hovertext
    assert "NVIDIA H100 Tensor Core GPU datasheet" in sources and measured_here in sources
    assert "measured here 50 TFLOP/s fp32, 2.9 TB/s" in labels["conventions"].text
    # the datasheet has no overhead: the ceilings use the one measured here
    ceiling = trace(fig, "decode overhead ceiling")
    lm_head = next(c for c, _ in stages[1].measured if c.name == "lm_head")
    assert ceiling.y[list(ceiling.customdata).index("lm_head")] == pytest.approx(lm_head.flops / 8e-6 / 1e12, rel=1e-5)
    wall_s = next(s for c, s in stages[1].measured if c.name == "lm_head")
    hover = trace(fig, "decode measured").hovertext[list(trace(fig, "decode measured").customdata).index("lm_head")]
    assert f"{lm_head.bytes / wall_s / 2.9e12:.1%} of the bandwidth measured here" in hover
    assert not [t for t in roofline_figure(stages, H100, 3, measured=True).data if t.name.startswith("measured ")]
