"""The routing a mixture-of-experts trace keeps is the routing the model ran, on tiny random Mixtral and
Qwen3-MoE models (E = 7 experts, k = 4 per token, every dimension distinct; Qwen3-MoE's layer 1 dense).

Oracles: transformers' own `output_router_logits` (the top-k recomputed from them in numpy), the GEMMs
transformers' eager experts loop actually calls (counted with a TorchFunctionMode), a saved run read
back, and the shape-only runner on `meta`, where no routing exists and the analysis expects B*T*k/E.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from tiny_models import tiny_config, tiny_model
from torch.overrides import TorchFunctionMode

from explorer.analysis.measured import step_from_trace, stop_costs
from explorer.analysis.shapes import expert_load, predict_shapes
from explorer.analysis.spec import ModelSpec
from explorer.config import SamplingSettings
from explorer.errors import ConfigError
from explorer.runner.loading import load_shape_only
from explorer.runner.session import InferenceSession
from explorer.saved import run_from_dict, run_to_dict
from explorer.trace import dumps

PROMPT = "Route me, please."
E, K = 7, 4


@pytest.fixture(scope="module", params=["mixtral", "qwen3_moe"])
def session(request):
    session = InferenceSession(tiny_model(request.param), SamplingSettings(max_new_tokens=3))
    session.prefill(PROMPT, use_chat_template=False)
    session.decode_step()
    return session


def _top_k(logits: np.ndarray, renormalise: bool) -> tuple[np.ndarray, np.ndarray]:
    """Softmax over the E experts, the k largest (largest first), renormalised to sum to 1 or not."""
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ids = np.argsort(-probs, axis=-1, kind="stable")[:, :K]
    weights = np.take_along_axis(probs, ids, -1)
    return ids, weights / weights.sum(-1, keepdims=True) if renormalise else weights


def test_the_routing_equals_the_top_k_of_transformers_own_router_logits(session):
    _check_against_router_logits(session)


def test_qwen3_moe_with_norm_topk_prob_renormalises_the_weights():
    """Qwen3-MoE's default keeps the softmax probabilities of the k experts (a row sums below 1);
    `norm_topk_prob` renormalises them to sum to 1, as Mixtral always does."""
    session = InferenceSession(tiny_model("qwen3_moe", norm_topk_prob=True), SamplingSettings(max_new_tokens=2))
    session.prefill(PROMPT, use_chat_template=False)
    session.decode_step()
    _check_against_router_logits(session)
    np.testing.assert_allclose(session.traces[0].routing[0].weights.sum(-1), 1, atol=1e-6)


def _check_against_router_logits(session) -> None:
    model = copy.deepcopy(session.loaded.model)
    model.set_attn_implementation("eager")
    prompt = session.traces[0].input_ids
    with torch.inference_mode():
        logits = model(torch.tensor([session.ids[:len(prompt) + 1]]), output_router_logits=True).router_logits
    renormalise = model.config.model_type == "mixtral" or model.config.norm_topk_prob
    routed = session.traces[0].routing
    assert [record.layer for record in routed] == ([0, 2] if model.config.model_type == "qwen3_moe" else [0, 1, 2])
    for record, layer_logits, decoded in zip(routed, logits, session.traces[1].routing, strict=True):
        ids, weights = _top_k(layer_logits.double().numpy(), renormalise)
        assert record.expert_ids == ids[:-1].tolist() and decoded.expert_ids == ids[-1:].tolist()
        np.testing.assert_allclose(record.weights, weights[:-1], atol=1e-6)
        np.testing.assert_allclose(decoded.weights, weights[-1:], atol=1e-6)
        assert sum(record.tokens_per_expert) == len(prompt) * K and record.n_experts == E
        if not renormalise:
            assert (record.weights.sum(-1) < 1 - 1e-3).all()


class _Linears(TorchFunctionMode):
    """Every `F.linear` call's (input rows, weight shape) while active."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[int, tuple[int, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.linear:
            self.calls.append((args[0].shape[0], tuple(args[1].shape)))
        return func(*args, **(kwargs or {}))


def test_each_expert_runs_its_gemms_on_the_rows_the_routing_counts(session):
    """The per-expert shapes are computed from the measured routing: transformers' eager loop calls
    gate_up [tokens_e, d] x [2*d_ff, d]^T and down once per expert that received tokens, on tokens_e rows."""
    config = session.loaded.model.config
    width = getattr(config, "moe_intermediate_size", None) or config.intermediate_size
    fresh = InferenceSession(session.loaded, SamplingSettings(max_new_tokens=1))
    with _Linears() as linears:
        trace = fresh.prefill(PROMPT, use_chat_template=False)
    gate_up = [rows for rows, weight in linears.calls if weight == (2 * width, config.hidden_size)]
    down = [rows for rows, weight in linears.calls if weight == (config.hidden_size, width)]
    counted = [count for record in trace.routing for count in record.tokens_per_expert if count]
    assert gate_up == down == counted
    spec = ModelSpec.from_hf_config(config.to_dict())
    assert expert_load(spec, len(trace.input_ids), trace.routing[0].tokens_per_expert) == \
        [float(count) for count in trace.routing[0].tokens_per_expert]


def test_the_costs_read_the_experts_the_routing_reached(session):
    trace = session.traces[0]
    hit = {record.layer: record.experts_hit for record in trace.routing}
    assert step_from_trace(trace).experts_hit == tuple(hit.get(layer) for layer in range(3))
    config = session.loaded.model.config
    spec = ModelSpec.from_hf_config(config.to_dict())
    experts = stop_costs(spec, trace, 0)["layers.0.mlp.experts"]
    assert experts.weight_bytes == hit[0] * 3 * config.hidden_size * spec.intermediate_size * 4  # float32
    assert step_from_trace(session.traces[1]).experts_hit[0] == K  # one token reaches exactly k experts


def test_a_saved_moe_run_loads_back_with_its_routing(session):
    saved = json.loads(dumps(run_to_dict(session.run, session.attention)))
    run, _ = run_from_dict(saved)
    for step, original in zip(run.steps, session.traces, strict=True):
        assert [r.expert_ids for r in step.routing] == [r.expert_ids for r in original.routing]
        for record, kept in zip(step.routing, original.routing, strict=True):
            np.testing.assert_array_equal(record.weights, kept.weights)
    saved["traces"][0]["routing"][0]["expert_ids"][0][0] = E
    with pytest.raises(ConfigError, match=r"traces\[0\]\.routing\[0\]\.expert_ids.*distinct expert ids below 7"):
        run_from_dict(saved)


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_shape_only_has_no_routing_and_the_analysis_expects_b_t_k_over_e(family, tmp_path):
    tiny_config(family).save_pretrained(tmp_path)
    session = InferenceSession(load_shape_only(str(tmp_path)))
    trace = session.prefill(prompt_tokens=5, batch=2)
    spec = ModelSpec.from_hf_config(session.loaded.model.config.to_dict())
    predicted = predict_shapes(spec, "prefill", 2, 5, 5)
    assert {op.name: (op.input_shapes, op.output_shapes) for op in trace.ops if op.name in predicted} == predicted
    assert trace.op("layers.0.mlp.router").output_shapes == [[10, E], [10, K], [10, K]]
    assert trace.routing == [] and step_from_trace(trace).experts_hit == ()
    assert expert_load(spec, 10) == [10 * K / E] * E


def test_the_forward_view_draws_the_measured_routing_under_a_moe_layer(session):
    """Bars: the shown step's tokens per expert; heatmap: a row per token fed so far, its k weights."""
    from explorer.figures.views import ViewOptions
    from explorer.ui.hosting import LOCAL
    from explorer.ui.views import Visit, render

    visit = Visit.start(session, LOCAL)
    figure = render(visit, ViewOptions(step=1, layer=0, average_heads=False, hardware="h100-sxm"), "forward")
    traces = {trace.name: trace for trace in figure.data}
    assert list(traces["tokens per expert"].y) == session.traces[1].routing[0].tokens_per_expert
    assert traces["tokens per expert"].meta == "measured" and list(traces["expected B·T·k/E"].y) == [K / E] * 2
    cells = np.array(traces["routing weights"].z, dtype=float)
    assert cells.shape == (session.traces[1].context_length, E)
    first, last = session.traces[0].routing[0], session.traces[1].routing[0]
    np.testing.assert_allclose(np.sort(cells[0][~np.isnan(cells[0])])[::-1], first.weights[0], rtol=1e-6)
    assert np.flatnonzero(~np.isnan(cells[-1])).tolist() == sorted(last.expert_ids[0])
    if session.loaded.model.config.model_type == "qwen3_moe":  # its layer 1 is dense: no routing drawn
        dense = render(visit, ViewOptions(step=1, layer=1, average_heads=False, hardware="h100-sxm"), "forward")
        assert "tokens per expert" not in {trace.name for trace in dense.data}


def test_a_shape_only_forward_view_draws_the_expected_load(tmp_path):
    from explorer.figures.views import ViewOptions
    from explorer.ui.hosting import LOCAL
    from explorer.ui.views import Visit, render

    tiny_config("mixtral").save_pretrained(tmp_path)
    session = InferenceSession(load_shape_only(str(tmp_path)))
    session.prefill(prompt_tokens=5, batch=2)
    figure = render(Visit.start(session, LOCAL), ViewOptions(step=0, layer=2, average_heads=False,
                                                             hardware="h100-sxm"), "forward")
    traces = {trace.name: trace for trace in figure.data}
    assert traces["tokens per expert"].meta == "expected" and list(traces["tokens per expert"].y) == [10 * K / E] * E
    assert "routing weights" not in traces


def test_the_trace_command_prints_each_steps_measured_load(session, capsys):
    from explorer.cli.trace_cmd import print_journey

    print_journey(list(session.traces), session.text, layer=0)
    out = capsys.readouterr().out
    for trace in session.traces:
        assert f"{trace.routing[0].tokens_per_expert} (counted from the measured routing)" in out


def test_a_what_if_keeps_the_executed_routing_only_for_the_same_token_rows(session):
    from explorer.analysis.measured import Scenario, trace_costs

    spec = ModelSpec.from_hf_config(session.loaded.model.config.to_dict())
    executed = trace_costs(spec, session.traces[1])
    formats, _ = Scenario(weights="fp8").applied(executed.step, executed.precision)
    batched, _ = Scenario(batch=64).applied(executed.step, executed.precision)
    assert formats.experts_hit == executed.step.experts_hit and formats.experts_hit[0] == K
    assert batched.experts_hit == ()
