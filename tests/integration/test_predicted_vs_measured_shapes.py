"""The shapes the analysis predicts from a config equal the shapes the shape-only runner measures."""

from __future__ import annotations

import pytest

from explorer.analysis.shapes import predict_shapes
from explorer.config import PRESET_SOURCES
from explorer.runner.configs import resolved_spec
from explorer.runner.loading import load_shape_only
from explorer.runner.session import InferenceSession

PROMPT_TOKENS = 12


@pytest.mark.parametrize("preset", sorted(PRESET_SOURCES))
def test_every_stop_of_prefill_and_decode_matches_the_prediction(preset):
    spec = resolved_spec(preset)
    session = InferenceSession(load_shape_only(preset))
    traces = [session.prefill(prompt_tokens=PROMPT_TOKENS), session.decode_step()]
    for trace in traces:
        tokens = len(trace.input_ids)
        predicted = predict_shapes(spec, trace.stage, 1, tokens, trace.context_length)
        measured = {op.name: (op.input_shapes, op.output_shapes) for op in trace.ops if op.name in predicted}
        assert set(measured) == set(predicted)
        mismatched = [name for name in predicted if measured[name] != predicted[name]]
        assert mismatched == [], (trace.stage, mismatched[:3])
        outside = 5 if spec.arch.positions == "learned" else 3  # embed (pos_embed, embed_add), final_norm, lm_head
        assert len(predicted) == outside + spec.n_layers * len([op for op in trace.ops if op.layer == 0])


@pytest.mark.parametrize(("preset", "batch", "lm_head_all"), [("llama-3-8b", 8, False), ("qwen3-0.6b", 3, True),
                                                             ("mistral-7b", 2, True)])
def test_a_batch_and_the_lm_head_over_all_positions_match_the_prediction(preset, batch, lm_head_all):
    """B sequences at once: every stop's measured shape carries B, as the analysis predicts; with the
    LM head over all positions the prefill's logits are [B, T, V]."""
    spec = resolved_spec(preset)
    session = InferenceSession(load_shape_only(preset))
    traces = [session.prefill(prompt_tokens=PROMPT_TOKENS, batch=batch, lm_head_all=lm_head_all),
              session.decode_step()]
    for trace in traces:
        tokens = len(trace.input_ids)
        predicted = predict_shapes(spec, trace.stage, batch, tokens, trace.context_length, lm_head_all)
        measured = {op.name: (op.input_shapes, op.output_shapes) for op in trace.ops if op.name in predicted}
        assert measured == predicted
        assert trace.op("sample").input_shapes == [[batch, spec.vocab_size]]
        assert [kv.key_shape[0] for kv in trace.kv] == [batch] * spec.n_layers
    head_rows = PROMPT_TOKENS if lm_head_all else 1
    assert traces[0].op("lm_head").output_shapes == [[batch, head_rows, spec.vocab_size]]
