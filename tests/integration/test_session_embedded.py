"""The runner on the embedded SmolLM2-135M-Instruct: real answers, parity with `generate`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.config import SamplingSettings
from explorer.runner.session import InferenceSession

pytestmark = pytest.mark.real_model

CAPITAL_QUESTION = "What is the capital of France?"


def _run(session: InferenceSession, prompt: str, **prefill_kwargs) -> None:
    session.prefill(prompt, **prefill_kwargs)
    while not session.finished:
        session.decode_step()


def _generate(embedded_model, session: InferenceSession, **kwargs) -> torch.Tensor:
    """`generate` from the same prompt ids as the session's prefill; returns the output object."""
    prompt_ids = torch.tensor([session.ids[: len(session.ids) - len(session.generated)]])
    with torch.inference_mode():
        return embedded_model.model.generate(
            prompt_ids, attention_mask=torch.ones_like(prompt_ids), return_dict_in_generate=True,
            eos_token_id=embedded_model.eos_token_ids, pad_token_id=embedded_model.eos_token_ids[0], **kwargs,
        )


def test_greedy_chat_answer_names_paris(embedded_model):
    session = InferenceSession(embedded_model, SamplingSettings(max_new_tokens=24))
    _run(session, CAPITAL_QUESTION)
    assert "Paris" in session.text


def test_twenty_greedy_tokens_equal_generate(embedded_model):
    session = InferenceSession(embedded_model, SamplingSettings(max_new_tokens=20))
    _run(session, "Write one sentence about the sea.")
    out = _generate(embedded_model, session, do_sample=False, max_new_tokens=20)
    prompt_length = len(session.ids) - len(session.generated)
    assert out.sequences[0, prompt_length:].tolist() == session.generated
    assert len(session.generated) == 20


def test_sampled_steps_have_the_probabilities_generate_reports(embedded_model):
    settings = SamplingSettings(do_sample=True, temperature=0.7, top_k=40, top_p=0.9, min_p=0.05,
                                max_new_tokens=8, seed=1234)
    session = InferenceSession(embedded_model, settings)
    _run(session, "Name a colour.")
    torch.manual_seed(settings.seed)
    out = _generate(embedded_model, session, do_sample=True, temperature=0.7, top_k=40, top_p=0.9,
                    min_p=0.05, max_new_tokens=8, output_scores=True)
    prompt_length = len(session.ids) - len(session.generated)
    assert out.sequences[0, prompt_length:].tolist() == session.generated
    for trace, scores in zip(session.traces, out.scores, strict=True):
        expected = torch.softmax(scores[0], dim=-1).numpy()
        assert [stage.name for stage in trace.sampling.stages] == ["raw", "temperature", "top_k", "top_p", "min_p"]
        # generate runs SDPA: logits within 1e-4 of the session's (test_faithfulness.py), so probabilities after
        # temperature 0.7 within 1e-4 / 0.7 x max p(1 - p) = 3.6e-5 (1.2e-5 measured)
        np.testing.assert_allclose(trace.sampling.final.probs, expected, atol=3.6e-5)
        np.testing.assert_array_equal(trace.sampling.final.kept, np.isfinite(scores[0].numpy()))


def test_the_first_step_has_a_prefill_shape_of_the_real_model(embedded_model):
    session = InferenceSession(embedded_model)
    trace = session.prefill(CAPITAL_QUESTION)
    T = len(trace.input_ids)
    assert trace.op("layers.0.attn.q_proj").output_shapes == [[1, T, 576]]
    assert trace.op("layers.29.attn.k_proj").output_shapes == [[1, T, 192]]
    assert trace.op("layers.0.attn.scores").output_shapes == [[1, 9, T, T]]
    assert trace.kv[0].key_shape == [1, 3, T, 64]
    assert trace.op("lm_head").output_shapes == [[1, 1, 49152]]
    assert trace.input_pieces[0] == "<|im_start|>"
