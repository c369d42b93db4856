"""A batch of real prompts of different lengths, left-padded with the mask and position ids `generate`
uses: each sequence's tokens equal those of the same prompt run alone (greedy, and sampled with its own
generator), sequence 0's logits agree with its run alone, its padded keys get no attention, and every
stop's shapes carry B. Tiny Llama and GPT-2 (whose learned positions need the right position ids), and
the embedded model."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import tiny_model

from explorer.config import SamplingSettings
from explorer.errors import PromptError
from explorer.runner.session import InferenceSession

PROMPTS = ["Hi", "What is 2+2?", "A longer prompt, padded least."]  # sequence 0 is padded most
STEPS = 5
LOGITS_ATOL = 1e-5  # GEMMs of other shapes round differently: 9e-8 measured on the tiny Llama


def run_to_end(loaded, settings, **prefill):
    session = InferenceSession(loaded, settings)
    session.prefill(use_chat_template=False, **prefill)
    while not session.finished:
        session.decode_step()
    return session


def alone(loaded, prompt: str, settings: SamplingSettings) -> InferenceSession:
    return run_to_end(loaded, settings, prompt=prompt)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def loaded(request):
    return tiny_model(request.param)


@pytest.fixture(scope="module")
def batch(loaded):
    return run_to_end(loaded, SamplingSettings(max_new_tokens=STEPS), prompts=PROMPTS)


def test_each_sequences_greedy_tokens_equal_the_prompt_run_alone(batch, loaded):
    for row, prompt in zip(batch.batch_rows, PROMPTS, strict=True):
        assert row == alone(loaded, prompt, SamplingSettings(max_new_tokens=STEPS)).ids


def test_each_steps_texts_are_each_prompts_text_run_alone(batch, loaded):
    singles = [alone(loaded, prompt, SamplingSettings(max_new_tokens=STEPS)) for prompt in PROMPTS]
    assert any(single.run.text for single in singles)  # something to compare
    for step in batch.traces:  # a sequence that ended keeps its text
        assert step.batch_texts == [single.run.text_at(step.step_index) for single in singles]


def test_sequence_0s_logits_agree_with_its_run_alone(batch, loaded):
    single = alone(loaded, PROMPTS[0], SamplingSettings(max_new_tokens=STEPS))
    assert len(single.traces) == len(batch.traces) == STEPS
    for padded, own in zip(batch.traces, single.traces, strict=True):
        np.testing.assert_allclose(padded.logits, own.logits, rtol=0, atol=LOGITS_ATOL)


def test_each_sequence_draws_with_its_own_generator(loaded):
    settings = SamplingSettings(do_sample=True, temperature=1.5, max_new_tokens=STEPS, seed=7)
    sampled = run_to_end(loaded, settings, prompts=PROMPTS)
    for b, (row, prompt) in enumerate(zip(sampled.batch_rows, PROMPTS, strict=True)):
        own_seed = SamplingSettings(do_sample=True, temperature=1.5, max_new_tokens=STEPS, seed=7 + b)
        assert row == alone(loaded, prompt, own_seed).ids


def test_padded_keys_get_no_attention_and_recomputing_agrees(batch, loaded):
    pads = len(batch.traces[0].input_ids) - len(batch.batch_rows[0]) + STEPS
    assert pads == len(PROMPTS[2]) - len(PROMPTS[0]) > 0
    lean = run_to_end(loaded, SamplingSettings(max_new_tokens=STEPS), prompts=PROMPTS)
    lean.attention_budget_bytes = 0
    for step in (0, STEPS - 1):
        probs = batch.attention.probs(step, 1)  # [h_q, q_len, n] of sequence 0
        assert not probs[:, -1, :pads].any()  # its real queries put nothing on the padding
        np.testing.assert_allclose(probs[:, -1].sum(-1), 1.0, rtol=1e-6)
        recomputed = lean._recompute_attention(step, 1)
        np.testing.assert_allclose(recomputed[:, -1], probs[:, -1], rtol=0, atol=1e-6)


def test_every_stop_carries_the_batch(batch, loaded):
    prefill, decode = batch.traces[0], batch.traces[1]
    T = len(prefill.input_ids)
    assert prefill.op("tokenize").output_shapes == [[3, T]]
    assert prefill.op("embed").input_shapes == [[3, T]] and decode.op("embed").input_shapes == [[3, 1]]
    assert {kv.key_shape[0] for kv in decode.kv} == {3} and decode.kv[0].key_shape[2] == T + 1
    assert decode.op("sample").input_shapes == [[3, loaded.model.config.vocab_size]]


@pytest.mark.parametrize("prompts", [[], ["ok"] * 9, ["ok", "  "]])
def test_a_bad_batch_of_prompts_is_refused(loaded, prompts):
    with pytest.raises(PromptError):
        InferenceSession(loaded).prefill(prompts=prompts)


@pytest.mark.real_model
def test_the_embedded_models_batch_of_three_equals_each_prompt_alone(embedded_model):
    prompts = ["Hi.", "What is the capital of France?", "Name a colour."]
    settings = SamplingSettings(max_new_tokens=3)
    session = run_to_end(embedded_model, settings, prompts=prompts)
    assert len({len(row) for row in session.batch_rows}) == 3  # three lengths
    for row, prompt in zip(session.batch_rows, prompts, strict=True):
        assert row == alone(embedded_model, prompt, settings).ids


def test_a_batch_run_saves_and_loads_back(batch, tmp_path):
    from explorer.saved import load_run, save_run

    loaded, _ = load_run(save_run(batch.run, batch.attention, tmp_path / "batch.json"))  # the schema checks it
    assert [step.op("embed").input_shapes for step in loaded.steps] == [
        step.op("embed").input_shapes for step in batch.run.steps]
    assert loaded.steps[0].op("embed").input_shapes == [[3, len(PROMPTS[2])]]
    assert [step.batch_texts for step in loaded.steps] == [step.batch_texts for step in batch.run.steps]
