"""The roofline's what-ifs on Llama-3-8B decode on H100 SXM at context 4,096 (merged projections,
fused attention), against the published per-operator table this cost model reproduces: batch 1 ->
64 moves the step's lower bound from 4.64 to 14.96 ms and attention to about 70% of it; an fp8 KV
cache gives 9.83 ms and int4 weights 11.60 ms at batch 64; in the figure the weight GEMMs sit at
an intensity of about B while attention stays at the GQA group size g = 4."""

from __future__ import annotations

import pytest

from explorer.analysis.costs import step_costs, step_total, totals_by_op
from explorer.analysis.hardware import get_hardware
from explorer.analysis.measured import Scenario, StepCosts, scenario_costs, sweeps
from explorer.analysis.precision import Precision
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.roofline import costs_roofline
from explorer.analysis.spec import ModelSpec
from explorer.config import load_hf_config
from explorer.figures.roofline import roofline_figure

H100 = get_hardware("h100-sxm")
ENGINE = {"merged": True, "fused": True}


@pytest.fixture(scope="module")
def llama():
    return ModelSpec.from_hf_config(load_hf_config("llama-3-8b"))


@pytest.fixture(scope="module")
def executed(llama):
    """Llama-3-8B decode at n = 4,096, B = 1, bf16, as the runner would count it (unmerged, eager)."""
    step, options = Step("decode", 1, 1, 4096), CostOptions(precision=Precision())
    costs = step_costs(llama, step, options)
    return StepCosts("decode", step, options, totals_by_op(costs), step_total(costs), [], "cuda:0")


def bound(costs: StepCosts):
    return costs_roofline(costs.step, costs.by_op, costs.total, H100, costs.precision)


@pytest.mark.parametrize("scenario, expected_ms", [
    (Scenario(**ENGINE), 4.644), (Scenario(batch=64, **ENGINE), 14.96),
    (Scenario(batch=64, kv="fp8", **ENGINE), 9.83), (Scenario(batch=64, weights="int4", **ENGINE), 11.60)])
def test_the_step_bound_moves_as_published(llama, executed, scenario, expected_ms):
    assert bound(scenario_costs(llama, executed, scenario)).time_lower_bound_s * 1e3 == \
        pytest.approx(expected_ms, rel=5e-3)


def test_at_batch_64_attention_takes_about_70_percent(llama, executed):
    one, many = (bound(scenario_costs(llama, executed, Scenario(batch=b, **ENGINE))) for b in (1, 64))
    assert 0.68 <= many.attention_fraction <= 0.72 and one.attention_fraction < 0.25
    assert many.attention_fraction + many.weight_gemm_fraction == pytest.approx(1.0, abs=0.02)


def test_an_empty_scenario_is_the_executed_step(llama, executed):
    same = scenario_costs(llama, executed, Scenario())
    assert not Scenario().active and same.step == executed.step and same.total == executed.total


def test_the_figure_puts_weight_gemms_near_b_and_attention_near_g(llama, executed):
    scenario = Scenario(batch=64, **ENGINE)
    figure = roofline_figure([scenario_costs(llama, executed, scenario)], H100, 1, executed=[executed],
                             changes=scenario.changes(), sweeps=sweeps(llama, executed, scenario, 8192))
    points = next(trace for trace in figure.data if trace.name == "decode analytic")
    at = dict(zip(points.customdata, points.x, strict=True))
    for gemm in ("attn.qkv_proj", "attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj", "lm_head"):
        assert 60 <= at[gemm] <= 64, gemm
    assert at["attn.scores"] == pytest.approx(4.0, rel=0.02)  # g = h_q / h_kv = 32 / 8
    assert figure.layout.title.text.startswith("What-if B = 64, merged projections, fused attention, against")
    # against the step as it ran (B = 1, unmerged, eager attention)
    own, what_if = (bound(c).time_lower_bound_s * 1e3 for c in (executed, scenario_costs(llama, executed, scenario)))
    assert f"against the run: decode ×{what_if / own:.3g} (attention 4% → 69%)" in figure.layout.title.text
    assert "<br>decode ≥ 14.96 ms (≤ 4,278 tokens/s), 100% memory-bound; attention 69%" in figure.layout.title.text
    sweep = {trace.name: trace for trace in figure.data if trace.name.endswith("sweep")}
    assert set(sweep) == {"batch sweep", "context sweep"}
    gemm_x = [x for x, label in zip(sweep["batch sweep"].x, sweep["batch sweep"].customdata, strict=True)
              if label.startswith("mlp.down_proj, ")]
    assert gemm_x == sorted(gemm_x) and gemm_x[0] < 2 < 100 < gemm_x[-1]  # intensity grows with B
    attention_x = {round(x, 2) for x, label in zip(sweep["context sweep"].x, sweep["context sweep"].customdata,
                                                   strict=True) if label.startswith("attn.scores, ")}
    assert len(attention_x) > 1 and all(3.9 <= x <= 4.0 for x in attention_x)  # stays at g as n grows 32x
    notes = {note.name: note for note in figure.layout.annotations if note.name}
    assert "q/k/v and gate/up merged" in notes["conventions"].text and "fused attention" in notes["conventions"].text
    assert "NVIDIA" in notes["conventions"].hovertext or "nvidia" in notes["conventions"].hovertext.lower()
