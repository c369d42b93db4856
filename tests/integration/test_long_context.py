"""The 2,048-token path on a tiny random model: what a session stores, what it recomputes, and that a
recomputed matrix equals eager attention's.

The tiny Llama has the dimensions of `tiny_models` (6 query heads, 2 KV heads, head_dim 10, 3 layers)
with a 2,100-token context. One prefill layer at 2,048 tokens is 6 x 2,048 x 2,048 float32 (~100 MB),
far over the budget used here, which holds the queries and exactly eight decode-step layer rows
(6 x n x 4 bytes each, n = 2,049..2,052): so the prefill keeps shapes only, and after the third decode
step the oldest decode rows give way. A matrix given up is recomputed from the step's post-RoPE queries,
which the session keeps, and the keys in its KV cache.
"""

from __future__ import annotations

import math
import random
import string

import numpy as np
import pytest
import torch
from tiny_models import DIMS, tiny_model
from transformers import AutoModelForCausalLM

from explorer.config import SamplingSettings
from explorer.runner.session import InferenceSession
from explorer.trace import StepTrace

PROMPT_TOKENS, STEPS = 2048, 4
HQ, HKV, DH, LAYERS, VOCAB = (DIMS[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim",
                                                "num_hidden_layers", "vocab_size"))
ROW_BYTES = HQ * 4  # one decode layer's attention is HQ x 1 x n float32: ROW_BYTES * n bytes
QUERY_BYTES = LAYERS * HQ * DH * 4 * (PROMPT_TOKENS + STEPS)  # every step's queries, kept within the budget
BUDGET_BYTES = QUERY_BYTES + 8 * ROW_BYTES * (PROMPT_TOKENS + 12)  # beside the queries 8 decode layer rows fit
assert QUERY_BYTES + 9 * ROW_BYTES * (PROMPT_TOKENS + 1) > BUDGET_BYTES  # and 9 never do


def kept(session: InferenceSession) -> set[tuple[int, int]]:
    """(step, layer) of every attention matrix the session holds."""
    store = session.attention.store
    return {(t.step_index, r.layer) for t in session.traces for r in t.attention if store.kept(t.step_index, r.layer)}


def rows(*steps: int) -> set[tuple[int, int]]:
    """(step, layer) for every layer of `steps`."""
    return {(step, layer) for step in steps for layer in range(LAYERS)}


def kept_bytes(session: InferenceSession) -> int:
    return session.attention.store.kept_bytes


def array_bytes(trace: StepTrace) -> int:
    """Bytes of the step's logits and sampling stages (each array once) plus its attention at full shape."""
    arrays = [trace.logits] + [s.logits for s in trace.sampling.stages]
    unique = {id(a): a for a in arrays}
    return sum(a.nbytes for a in unique.values()) + sum(math.prod(r.shape) * 4 for r in trace.attention)


@pytest.fixture(scope="module")
def loaded():
    return tiny_model("llama", max_position_embeddings=2100)


@pytest.fixture(scope="module")
def run(loaded):
    """The session after the prefill and STEPS decode steps; after each step, what it kept, the kept
    bytes, and the step's own array bytes when it was returned."""
    rng = random.Random(0)
    prompt = "".join(rng.choice(string.ascii_letters) for _ in range(PROMPT_TOKENS))
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=STEPS + 1), attention_budget_bytes=BUDGET_BYTES)
    snapshots = []
    for step in range(STEPS + 1):
        trace = session.prefill(prompt, use_chat_template=False) if step == 0 else session.decode_step()
        snapshots.append((kept(session), kept_bytes(session), array_bytes(trace), len(trace.ops)))
    return session, snapshots


@pytest.fixture(scope="module")
def eager_attentions(run, loaded):
    """[layers] of [h_q, n, n] eager attention over the session's whole final context, same weights."""
    session, _ = run
    eager = AutoModelForCausalLM.from_config(loaded.model.config, attn_implementation="eager").eval()
    eager.load_state_dict(loaded.model.state_dict())
    n = session.traces[-1].context_length
    with torch.inference_mode():
        out = eager(torch.tensor([session.ids[:n]]), output_attentions=True)
    return [a[0].numpy() for a in out.attentions]


def test_a_2048_token_prefill_keeps_every_layers_shape_but_no_matrix_over_the_budget(run):
    session, snapshots = run
    prefill = session.traces[0]
    assert len(prefill.input_ids) == prefill.context_length == PROMPT_TOKENS
    assert [r.shape for r in prefill.attention] == [[HQ, PROMPT_TOKENS, PROMPT_TOKENS]] * LAYERS
    assert not any(session.attention.store.kept(0, r.layer) for r in prefill.attention)
    assert snapshots[0][:2] == (set(), 0)
    assert [kv.key_shape for kv in prefill.kv] == [[1, HKV, PROMPT_TOKENS, DH]] * LAYERS


def test_decode_rows_are_kept_newest_first_and_dropped_oldest_first(run):
    session, snapshots = run
    assert [s[0] for s in snapshots[1:]] == [
        rows(1), rows(1, 2),
        rows(1, 2, 3) - {(1, 0)},  # nine rows do not fit: step 1's layer 0 goes first
        rows(2, 3, 4) - {(2, 0)},  # the newest eight rows
    ]
    for trace in session.traces[1:]:
        assert [r.shape for r in trace.attention] == [[HQ, 1, trace.context_length]] * LAYERS


def test_the_session_stores_kept_attention_within_the_budget_and_one_logits_array_a_step(run):
    session, snapshots = run
    assert all(kept_bytes_after <= BUDGET_BYTES - QUERY_BYTES for _, kept_bytes_after, _, _ in snapshots)
    assert snapshots[-1][1] == ROW_BYTES * sum(PROMPT_TOKENS + step for step, _ in snapshots[-1][0])
    arrays = {id(a): a for t in session.traces for a in [t.logits] + [s.logits for s in t.sampling.stages]}
    assert sum(a.nbytes for a in arrays.values()) == (STEPS + 1) * VOCAB * 4  # greedy: the raw logits only
    n = session.traces[-1].context_length
    assert sum(kv.key_bytes + kv.value_bytes for kv in session.traces[-1].kv) == 2 * LAYERS * HKV * n * DH * 4


def test_a_decode_steps_size_grows_with_the_context_only(run):
    session, snapshots = run
    for trace, (_, _, step_bytes, n_ops) in zip(session.traces[1:], snapshots[1:], strict=True):
        assert len(trace.input_ids) == 1
        assert n_ops == snapshots[1][3]
        assert step_bytes == VOCAB * 4 + LAYERS * ROW_BYTES * trace.context_length


@pytest.mark.parametrize("step, layer", [(0, 0), (0, 2), (1, 0), (1, 2), (2, 0), (4, 1)])
def test_attention_kept_or_recomputed_equals_eager_attention(run, eager_attentions, step, layer):
    session, _ = run
    probs = session.attention.probs(step, layer)
    trace = session.traces[step]
    n, q_len = trace.context_length, len(trace.input_ids)
    assert probs.shape == (HQ, q_len, n) and probs.dtype == np.float32
    np.testing.assert_allclose(probs, eager_attentions[layer][:, n - q_len:n, :n], atol=1e-5)
    # a recomputed matrix is kept, as the most recently used, only where it fits in the budget
    assert ((step, layer) in kept(session)) == (probs.nbytes <= BUDGET_BYTES - QUERY_BYTES)
    assert kept_bytes(session) <= BUDGET_BYTES - QUERY_BYTES


def test_recomputing_attention_runs_no_model_it_takes_the_kept_queries_and_the_cached_keys(run, loaded):
    session, _ = run
    fed = []
    handle = loaded.model.model.embed_tokens.register_forward_pre_hook(lambda m, args: fed.append(list(args[0].shape)))
    try:
        session._recompute_attention(2, 0)  # what `attention.probs` runs for a matrix it does not keep
        session._recompute_attention(0, 1)
    finally:
        handle.remove()
    assert fed == []


def test_the_session_keeps_each_steps_post_rope_queries_and_no_more(run):
    session, _ = run
    held = session.attention.store.inputs
    assert len(held) == STEPS + 1
    assert [list(held[0][layer].query.shape) for layer in range(LAYERS)] == [[HQ, PROMPT_TOKENS, DH]] * LAYERS
    assert all(list(held[step][layer].query.shape) == [HQ, 1, DH] for step in range(1, STEPS + 1)
               for layer in range(LAYERS))
    assert all(inputs.query.untyped_storage().nbytes() == inputs.query.nbytes  # no larger tensor kept alive
               for step in held for inputs in step.values())
    assert session.query_bytes == LAYERS * HQ * DH * 4 * (PROMPT_TOKENS + STEPS)


def test_a_closed_session_recomputes_by_running_the_context_again(loaded):
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=3), attention_budget_bytes=0)
    session.prefill("abcdefghij", use_chat_template=False)
    session.decode_step()
    kept_ids, recomputed = list(session.ids), session.attention.probs(1, 2)
    session._cache = None  # as a sliding-window layer that dropped early keys: the cache cannot serve
    fed = []
    handle = loaded.model.model.embed_tokens.register_forward_pre_hook(lambda m, args: fed.append(list(args[0].shape)))
    try:
        rerun = session.attention.probs(1, 2)
    finally:
        handle.remove()
    assert fed == [[1, len(kept_ids) - 1]]  # the step's whole context, once
    np.testing.assert_allclose(rerun, recomputed, atol=1e-6)


def naive_key_mass(probs: np.ndarray, factor: int) -> np.ndarray:
    """[h, rows, n] -> [h, rows, ceil(n / factor)]: the sums over each block of keys, one block at a time."""
    n = probs.shape[-1]
    return np.stack([probs[..., start:start + factor].sum(axis=-1) for start in range(0, n, factor)], axis=-1)


@pytest.mark.parametrize("layer, factor", [(0, 41), (2, 7)])
def test_a_prefills_key_masses_computed_block_by_block_equal_eager_attentions(run, eager_attentions, layer, factor):
    """The pooled view's first stage is taken from each block of recomputed rows (no [h, T, T] held):
    it equals the sums of eager attention's probabilities; then it is kept for the next redraw."""
    session, _ = run
    mass = session.attention.probs(0, layer, key_factor=factor)
    assert mass.shape == (HQ, PROMPT_TOKENS, math.ceil(PROMPT_TOKENS / factor)) and mass.dtype == np.float32
    eager = eager_attentions[layer][:, :PROMPT_TOKENS, :PROMPT_TOKENS]
    np.testing.assert_allclose(mass, naive_key_mass(eager, factor), atol=1e-5)
    np.testing.assert_allclose(mass.sum(axis=-1), 1.0, atol=1e-5)
    assert not session.attention.kept(0, layer)  # the whole matrix is still not kept
    assert session.attention.store.pooled(0, layer, factor) is mass  # the masses are, for the next redraw


def test_a_few_prefill_rows_are_recomputed_alone_and_equal_eager_attentions(run, eager_attentions):
    """A zoom window's rows, across a boundary of the recompute's query blocks (170 rows here)."""
    session, _ = run
    part = session.attention.probs(0, 1, rows=(1000, 1048))
    assert part.shape == (HQ, 48, PROMPT_TOKENS)
    np.testing.assert_allclose(part, eager_attentions[1][:, 1000:1048, :PROMPT_TOKENS], atol=1e-5)
