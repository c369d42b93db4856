"""Continuing from an earlier step: the later steps dropped, the cache cropped, the generator rewound,
so the tokens that follow are those of a session that stopped at that step."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import tiny_model

from explorer.config import SamplingSettings
from explorer.errors import SessionStateError
from explorer.runner.session import InferenceSession

PROMPT = "Once upon a time"
HOT = SamplingSettings(do_sample=True, temperature=1.5, top_k=0, top_p=1.0, seed=11, max_new_tokens=20)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def loaded(request):
    return tiny_model(request.param)


COOLER = SamplingSettings(do_sample=True, temperature=0.9, top_k=8, top_p=1.0, seed=11, max_new_tokens=20)


def run_tokens(loaded, decode_steps: int, then: int = 0, branch_at: int | None = None,
               then_settings: SamplingSettings = COOLER) -> InferenceSession:
    session = InferenceSession(loaded, HOT)
    session.prefill(PROMPT)
    for _ in range(decode_steps):
        session.decode_step()
    if branch_at is not None:
        session.branch(branch_at)
    for _ in range(then):
        session.decode_step(then_settings)
    return session


def test_branching_from_step_2_gives_the_tokens_of_a_fresh_run_that_stopped_there(loaded):
    fresh = run_tokens(loaded, decode_steps=2, then=4)
    branched = run_tokens(loaded, decode_steps=6, branch_at=2, then=4)
    dropped = run_tokens(loaded, decode_steps=6)
    assert branched.generated == fresh.generated
    assert branched.generated[3:] != dropped.generated[3:]  # the steps dropped drew with other settings
    assert branched.ids == fresh.ids and branched.text == fresh.text
    assert [t.step_index for t in branched.traces] == list(range(7))
    for mine, theirs in zip(branched.traces, fresh.traces, strict=True):
        assert mine.context_length == theirs.context_length
        np.testing.assert_array_equal(mine.logits, theirs.logits)  # the same cache, bit for bit


def test_branching_drops_the_later_steps_and_crops_the_cache(loaded):
    session = run_tokens(loaded, decode_steps=5, branch_at=1)
    assert len(session.traces) == 2
    context = session.traces[1].context_length
    assert session._cache.get_seq_length() == context
    assert len(session.ids) == context + 1  # the token step 1 chose waits to be fed
    assert session.run.ids == session.ids
    assert session.attention.store.query_bytes == sum(
        layer.query.nbytes for step in session.attention.store.inputs for layer in step.values())
    # the attention of the kept steps is still served, recomputed where not kept
    probs = session.attention.probs(1, 0)
    assert probs.shape[-1] == context
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


def test_branching_needs_an_earlier_step(loaded):
    session = run_tokens(loaded, decode_steps=2)
    with pytest.raises(SessionStateError, match="no earlier step 2"):
        session.branch(2)
    with pytest.raises(SessionStateError, match="no earlier step -1"):
        session.branch(-1)
    assert len(session.traces) == 3  # nothing lost


def test_a_finished_run_can_continue_from_an_earlier_step(loaded):
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=3))
    session.prefill(PROMPT)
    session.decode_step()
    session.decode_step()
    assert session.finished
    session.branch(0)
    assert not session.finished
    session.decode_step()
    assert len(session.traces) == 2
