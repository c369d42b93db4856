"""Faithfulness of the families traced since the first release (GPT-2), on tiny random models with every
dimension distinct: the traced logits equal plain transformers with eager attention to 1e-5, the
attention probabilities equal `output_attentions`, greedy tokens equal `generate`, and every stop's
measured shapes equal what the analysis predicts, with the LM head on the last position or on all."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tiny_models import tiny_model

from explorer.analysis.costs import step_costs
from explorer.analysis.measured import step_from_trace, trace_options
from explorer.analysis.shapes import predict_shapes
from explorer.analysis.spec import ModelSpec
from explorer.config import SamplingSettings
from explorer.runner.session import InferenceSession

FAMILIES = ["gpt2", "mixtral", "qwen3_moe"]
PROMPT = "What is 2+2?"
STEPS = 5


@pytest.fixture(scope="module", params=FAMILIES)
def loaded(request):
    return tiny_model(request.param)


@pytest.fixture(scope="module")
def run(loaded):
    """A greedy session run to its end, its prompt ids, and `generate` on an eager copy of the model."""
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=STEPS))
    session.prefill(PROMPT, use_chat_template=False)
    while not session.finished:
        session.decode_step()
    prompt_ids = torch.tensor([session.ids[: len(session.ids) - len(session.generated)]])
    eager = copy.deepcopy(loaded.model)
    eager.set_attn_implementation("eager")
    with torch.inference_mode():
        out = eager.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=False,
                             max_new_tokens=STEPS, eos_token_id=1, pad_token_id=0, return_dict_in_generate=True,
                             output_logits=True)
    return session, prompt_ids, eager, out


def test_every_steps_logits_equal_the_plain_eager_models_to_1e_5(run):
    session, _, _, out = run
    assert len(out.logits) == len(session.traces) == STEPS
    for trace, logits in zip(session.traces, out.logits, strict=True):
        np.testing.assert_allclose(trace.logits, logits[0].numpy(), rtol=0, atol=1e-5, err_msg=f"step {trace.step_index}")


def test_greedy_tokens_equal_generates(run):
    session, prompt_ids, _, out = run
    assert out.sequences[0, prompt_ids.shape[1]:].tolist() == session.generated


def test_attention_probabilities_equal_output_attentions(run):
    session, _, eager, _ = run
    n = session.traces[-1].context_length
    with torch.inference_mode():
        attentions = eager(torch.tensor([session.ids[:n]]), output_attentions=True).attentions
    T0 = len(session.traces[0].input_ids)
    for layer, probs in enumerate(attentions):
        np.testing.assert_allclose(session.attention.probs(0, layer), probs[0, :, :T0, :T0].numpy(), atol=1e-6)
        last = session.attention.probs(len(session.traces) - 1, layer)
        np.testing.assert_allclose(last, probs[0, :, n - 1:n, :n].numpy(), atol=1e-6)


@pytest.mark.parametrize("lm_head_all", [False, True])
def test_every_stop_has_the_predicted_shapes_and_a_cost(loaded, lm_head_all):
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=STEPS))
    traces = [session.prefill(PROMPT, use_chat_template=False, lm_head_all=lm_head_all), session.decode_step()]
    spec = ModelSpec.from_hf_config(loaded.model.config.to_dict())
    for trace in traces:
        tokens = len(trace.input_ids)
        predicted = predict_shapes(spec, trace.stage, 1, tokens, trace.context_length, lm_head_all)
        measured = {op.name: (op.input_shapes, op.output_shapes) for op in trace.ops if op.name in predicted}
        assert measured == predicted
        assert trace.op("lm_head").output_shapes == [[1, tokens if lm_head_all else 1, spec.vocab_size]]
        costs = {cost.name for cost in step_costs(spec, step_from_trace(trace), trace_options(trace))}
        assert costs == {op.name for op in trace.ops if op.name in predicted and op.kind != "reshape"
                         and not op.name.endswith("gqa_expand")}


def test_the_lm_head_over_all_positions_leaves_the_tokens_unchanged(loaded):
    """The last position's logits are the same whichever positions the head runs on (to float32 rounding)."""
    last, every = (InferenceSession(loaded, SamplingSettings(max_new_tokens=3)) for _ in range(2))
    last.prefill(PROMPT, use_chat_template=False)
    every.prefill(PROMPT, use_chat_template=False, lm_head_all=True)
    np.testing.assert_allclose(every.traces[0].logits, last.traces[0].logits, rtol=0, atol=1e-5)
    assert every.generated == last.generated


@pytest.mark.parametrize("view", ["forward", "journey", "attention", "kv_cache", "sampling", "roofline"])
def test_every_view_draws_the_run(run, view):
    from explorer.figures.views import ViewOptions
    from explorer.ui.hosting import LOCAL
    from explorer.ui.views import Visit, render

    visit = Visit.start(run[0], LOCAL)
    figure = render(visit, ViewOptions(step=2, layer=1, average_heads=False, hardware="h100-sxm"), view)
    assert figure.layout.meta == {"view": view, "step": 2}
    assert "error" not in str(figure.layout.title.text or "").lower()
