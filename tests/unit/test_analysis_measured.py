"""Measured points from a hand-built trace: achieved FLOP/s and bytes/s per operator."""

from __future__ import annotations

import pytest

from explorer.analysis.measured import measured_points, step_from_trace, trace_precision
from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config
from explorer.trace import OpRecord, StepTrace

SMOL = ModelSpec.from_hf_config(load_hf_config("smollm2-135m"))


def make_trace() -> StepTrace:
    ops = [
        OpRecord("embed", "gather", None, [[2, 1]], [[2, 1, 576]], "float32", 0.01),
        OpRecord("layers.0.attn.q_proj", "gemm", 0, [[2, 1, 576]], [[2, 1, 576]], "float32", 0.5),
        OpRecord("layers.0.attn.split_heads", "reshape", 0, [], [], "float32", None),
        OpRecord("layers.0.attn.scores", "batched_gemm", 0, [], [], "float32", 0.0),
        OpRecord("sample", "sample", None, [[2, 49152]], [[2]], "int64", 0.2),
    ]
    return StepTrace(stage="decode", step_index=1, input_ids=[5, 6], input_pieces=["a", "b"], context_length=40,
                     ops=ops, kv=[], attention=[], logits=None, sampling=None)


def test_step_and_precision_come_from_the_trace():
    step = step_from_trace(make_trace())
    assert (step.stage, step.batch, step.tokens, step.context) == ("decode", 2, 1, 40)
    assert trace_precision(make_trace()).weights == "fp32"


def test_achieved_rates_divide_analytic_cost_by_measured_time():
    points = measured_points(make_trace(), SMOL)
    assert [p.cost.name for p in points] == ["embed", "layers.0.attn.q_proj"]
    q_proj = points[1]
    flops = 2 * 2 * 576 * 576
    bytes_moved = 576 * 576 * 4 + 2 * 2 * 576 * 4
    assert q_proj.achieved_flops_per_s == pytest.approx(flops / 0.5e-3)
    assert q_proj.achieved_bytes_per_s == pytest.approx(bytes_moved / 0.5e-3)
    assert q_proj.arithmetic_intensity == pytest.approx(flops / bytes_moved)


def test_the_lm_head_over_every_position_is_costed_as_it_ran_and_kept_by_an_empty_what_if():
    """A prefill of 7 tokens whose LM head ran on all 7 (`--lm-head-all`): 7x the last position's GEMM."""
    from explorer.analysis.measured import Scenario, scenario_costs, trace_costs, trace_options

    def prefill(rows: int) -> StepTrace:
        ops = [OpRecord("embed", "gather", None, [[1, 7]], [[1, 7, 576]], "float32", 0.01),
               OpRecord("lm_head", "gemm", None, [[1, rows, 576]], [[1, rows, 49152]], "float32", 0.3)]
        return StepTrace(stage="prefill", step_index=0, input_ids=[5] * 7, input_pieces=["a"] * 7, context_length=7,
                         ops=ops, kv=[], attention=[], logits=None, sampling=None)

    every, last = trace_costs(SMOL, prefill(7)), trace_costs(SMOL, prefill(1))
    assert trace_options(prefill(7)).lm_head_all_positions and not trace_options(prefill(1)).lm_head_all_positions
    head = {cost.name: cost for cost in every.by_op}["lm_head"]
    assert head.flops == 7 * {cost.name: cost for cost in last.by_op}["lm_head"].flops == 7 * 2 * 576 * 49152
    assert scenario_costs(SMOL, every, Scenario()).total.flops == every.total.flops
