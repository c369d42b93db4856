"""The memory estimate of a prompt (`explorer.analysis.memory.prompt_memory`) against what a session
really holds, and the refusal of a prompt that would not fit, before anything is allocated.

Oracles: the KV cache tensors' bytes after the prefill and one decode step, and the attention store's
query and kept-matrix bytes after the prefill, measured on tiny models (every dimension distinct).
"""

from __future__ import annotations

import pytest

from explorer.analysis.memory import prompt_memory
from explorer.config import SamplingSettings
from explorer.errors import PromptError
from explorer.run import Run
from explorer.runner import memory_check
from explorer.runner.attention_store import AttentionStore
from explorer.runner.session import InferenceSession
from tests.tiny_models import tiny_model

PROMPT = "The estimate of a prompt."  # 25 characters: 25 tokens, no chat template


def _layer_matrix_bytes(loaded) -> int:
    config = loaded.model.config
    return config.num_attention_heads * len(PROMPT) ** 2 * 4


@pytest.mark.parametrize("family", ["llama", "qwen3", "phi3"])
@pytest.mark.parametrize("kept_layers", [0, 1, 3])
def test_estimate_equals_the_sessions_cache_queries_and_kept_matrices(family, kept_layers, monkeypatch):
    loaded = tiny_model(family)
    config = loaded.model.config
    query_bytes = config.num_hidden_layers * config.num_attention_heads * config.head_dim * len(PROMPT) * 4
    budget = query_bytes + (kept_layers + 1) * _layer_matrix_bytes(loaded) - 1  # a byte short of one more
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=4), attention_budget_bytes=budget)
    estimate = session.memory_estimate(len(PROMPT))
    handed, add = [], AttentionStore.add  # the matrices the prefill itself kept, before any gave way
    monkeypatch.setattr(AttentionStore, "add", lambda store, matrices, inputs: (
        handed.append(sum(m.nbytes for m in matrices.values())), add(store, matrices, inputs)))
    session.prefill(PROMPT, use_chat_template=False)
    assert handed == [kept_layers * _layer_matrix_bytes(loaded)]  # its peak within the budget too
    assert estimate.query_bytes == session.attention.store.query_bytes
    assert estimate.kept_matrix_bytes == session.attention.store.kept_bytes
    assert sum(session.attention.store.kept(0, layer) for layer in range(config.num_hidden_layers)) == kept_layers
    session.decode_step()
    assert estimate.kv_cache_bytes == sum(s.key_bytes + s.value_bytes for s in session.traces[-1].kv)
    assert estimate.weight_bytes == sum(p.numel() * p.element_size() for p in loaded.model.parameters())


def test_a_prompt_that_would_not_fit_is_refused_before_anything_is_allocated(monkeypatch):
    loaded = tiny_model("llama")
    session = InferenceSession(loaded)
    need = session.memory_estimate(len(PROMPT))
    monkeypatch.setattr(memory_check, "free_memory_bytes", lambda device: need.run_bytes - 1)
    calls = []
    hook = loaded.model.register_forward_pre_hook(lambda module, args: calls.append(1))
    before = session.run
    try:
        with pytest.raises(PromptError) as refusal:
            session.prefill(PROMPT, use_chat_template=False)
    finally:
        hook.remove()
    assert calls == [] and session._cache is None and session.run is before and not session.run.steps
    fits = 0
    spec = Run("tiny", "", loaded.model.config.to_dict()).spec
    while prompt_memory(spec, fits + 1, 4, session.attention_budget_bytes).run_bytes <= need.run_bytes - 1:
        fits += 1
    message = str(refusal.value)
    assert f"The prompt is {len(PROMPT)} tokens" in message and f"at most {fits} tokens" in message
    assert f"{need.total_bytes / 1e6:,.0f} MB estimated" in message


def test_a_prompt_that_just_fits_runs(monkeypatch):
    loaded = tiny_model("llama")
    session = InferenceSession(loaded)
    need = session.memory_estimate(len(PROMPT))
    monkeypatch.setattr(memory_check, "free_memory_bytes", lambda device: need.run_bytes)
    shown = []
    trace = session.prefill(PROMPT, use_chat_template=False, on_start=lambda n, estimate: shown.append((n, estimate)))
    assert len(trace.input_ids) == len(PROMPT) and shown == [(len(PROMPT), need)]
