"""Shape-only mode: real configs on the meta device give exact shapes with no weights."""

from __future__ import annotations

import pytest

from explorer.config import SamplingSettings
from explorer.errors import SessionStateError
from explorer.runner.loading import load_shape_only
from explorer.runner.session import InferenceSession


@pytest.fixture(scope="module")
def qwen3_steps():
    session = InferenceSession(load_shape_only("qwen3-0.6b"), SamplingSettings(max_new_tokens=4))
    return session, [session.prefill(prompt_tokens=17), session.decode_step()]


def test_qwen3_0_6b_prefill_and_one_decode_step_have_the_published_shapes(qwen3_steps):
    _, (prefill, step) = qwen3_steps
    assert prefill.op("layers.0.attn.q_proj").output_shapes == [[1, 17, 2048]]
    assert prefill.op("layers.0.attn.k_proj").output_shapes == [[1, 17, 1024]]
    assert prefill.op("layers.0.mlp.gate_proj").output_shapes == [[1, 17, 3072]]
    assert prefill.op("layers.27.attn.q_norm").output_shapes == [[1, 17, 16, 128]]
    assert prefill.kv[0].key_shape == [1, 8, 17, 128]
    assert step.kv[0].key_shape == [1, 8, 18, 128]
    assert step.op("layers.0.attn.scores").output_shapes == [[1, 16, 1, 18]]
    assert prefill.op("lm_head").output_shapes == step.op("lm_head").output_shapes == [[1, 1, 151936]]
    assert len(prefill.kv) == 28


def test_shape_only_steps_carry_no_values(qwen3_steps):
    session, (prefill, step) = qwen3_steps
    assert prefill.shape_only and prefill.device == "meta"
    assert prefill.logits is None and prefill.sampling is None
    assert not any(session.attention.has(step.step_index, record.layer) for record in step.attention)
    assert prefill.kv[0].key_bytes == 17 * 8 * 128 * 2  # the config's bfloat16: what it would allocate
    with pytest.raises(SessionStateError, match="Shape-only"):
        session.attention.probs(0, 0)


def test_llama_3_8b_decode_step_at_batch_one(qwen3_steps):
    session = InferenceSession(load_shape_only("llama-3-8b"))
    session.prefill(prompt_tokens=1000)
    step = session.decode_step()
    assert step.op("layers.0.attn.q_proj").output_shapes == [[1, 1, 4096]]
    assert step.kv[0].key_shape == [1, 8, 1001, 128]
    assert step.op("layers.31.attn.scores").output_shapes == [[1, 32, 1, 1001]]
    assert step.op("layers.0.mlp.gate_proj").output_shapes == [[1, 1, 14336]]
    assert step.op("lm_head").output_shapes == [[1, 1, 128256]]


def test_gpt2_from_a_config_that_sets_pad_token_id_runs_shape_only(tmp_path):
    """GPT-2's padding warning looks for `pad_token_id` among the ids, which meta ids cannot give; the
    shapes are those of the config without it."""
    import json

    from explorer.config import load_hf_config

    config = load_hf_config("gpt2")
    (tmp_path / "config.json").write_text(json.dumps({**config, "pad_token_id": 0}))
    session = InferenceSession(load_shape_only(str(tmp_path / "config.json")), SamplingSettings(max_new_tokens=4))
    steps = [session.prefill(prompt_tokens=5), session.decode_step()]
    assert [step.kv[0].key_shape for step in steps] == [[1, 12, 5, 64], [1, 12, 6, 64]]
