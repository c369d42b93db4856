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
        assert len(predicted) == 3 + spec.n_layers * len([op for op in trace.ops if op.layer == 0])
