"""The explorer shows what the model computes: with default sampling its logits are the plain transformers
model's and its greedy tokens are `generate`'s, so no optimisation of the tracer can silently change what is
shown (embedded SmolLM2-135M-Instruct, float32 on the CPU).

A traced step runs eager attention's arithmetic (instrumented, `explorer.runner.hooks`), a GQA group's query
heads in one GEMM where eager runs one GEMV per head at a decode step, so it rounds differently from the plain
model with eager attention: up to 3.5e-5 on logits of about 25 (1.4e-6 relative), measured; the bound is
5e-5. The plain model's default attention (SDPA) rounds differently too: up to 2.9e-5 over 45 steps,
measured; plain transformers itself disagrees by 2.5e-5 between computing every position's logits and the
last one's only. Against SDPA the bound is therefore 1e-4.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from explorer.config import SamplingSettings
from explorer.runner.session import InferenceSession

pytestmark = pytest.mark.real_model

PROMPT = "List three uses of a paperclip."
SETTINGS = dataclasses.replace(SamplingSettings(), max_new_tokens=16)  # default sampling: greedy, no filter
SDPA_ATOL = 1e-4
EAGER_ATOL = 5e-5


def _generate(model, prompt_ids: torch.Tensor, eos_ids: list[int]):
    with torch.inference_mode():
        return model.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=False,
                              max_new_tokens=SETTINGS.max_new_tokens, eos_token_id=eos_ids, pad_token_id=eos_ids[0],
                              return_dict_in_generate=True, output_logits=True)


@pytest.fixture(scope="module")
def run(embedded_model):
    """The session run to its end, its prompt ids, and `generate` from them with SDPA and with eager attention."""
    session = InferenceSession(embedded_model, SETTINGS)
    session.prefill(PROMPT)
    while not session.finished:
        session.decode_step()
    prompt_ids = torch.tensor([session.ids[: len(session.ids) - len(session.generated)]])
    eager = copy.deepcopy(embedded_model.model)  # the shared model keeps its attention implementation
    eager.set_attn_implementation("eager")
    eos_ids = embedded_model.eos_token_ids
    return session, prompt_ids, _generate(embedded_model.model, prompt_ids, eos_ids), _generate(eager, prompt_ids, eos_ids)


def test_every_steps_logits_equal_the_plain_eager_models_within_float32_rounding(run):
    session, prompt_ids, sdpa, eager = run
    assert len(eager.logits) == len(session.traces) == SETTINGS.max_new_tokens
    for trace, logits in zip(session.traces, eager.logits, strict=True):
        assert trace.logits.shape == (49152,) and trace.logits.dtype == np.float32
        np.testing.assert_allclose(trace.logits, logits[0].numpy(), rtol=0, atol=EAGER_ATOL, err_msg=f"step {trace.step_index}")


def test_every_steps_logits_equal_the_default_sdpa_models_within_float32_rounding(run, embedded_model):
    session, prompt_ids, sdpa, eager = run
    with torch.inference_mode():
        plain_prefill = embedded_model.model(prompt_ids, logits_to_keep=1).logits[0, -1].numpy()
    np.testing.assert_allclose(session.traces[0].logits, plain_prefill, rtol=0, atol=SDPA_ATOL)
    for trace, logits in zip(session.traces, sdpa.logits, strict=True):
        np.testing.assert_allclose(trace.logits, logits[0].numpy(), rtol=0, atol=SDPA_ATOL,
                                   err_msg=f"step {trace.step_index}")


def test_greedy_tokens_equal_generates(run):
    session, prompt_ids, sdpa, eager = run
    assert sdpa.sequences[0, prompt_ids.shape[1]:].tolist() == session.generated
    assert eager.sequences[0, prompt_ids.shape[1]:].tolist() == session.generated
    assert session.generated == [int(np.argmax(trace.logits)) for trace in session.traces]
