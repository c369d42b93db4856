"""Continuous batching on tiny models: each request's greedy tokens from the packed steps equal
transformers' `generate` on that request alone, its logits equal its own prefill-and-decode's within
float error, each step's measured packed input is the hand count, and bad input is refused."""

from __future__ import annotations

import pytest
import torch
from tiny_models import DIMS, tiny_model

from explorer.errors import PromptError, SessionStateError
from explorer.lab.params import read_params
from explorer.lab.table import LAB
from explorer.runner.lab.batching import run_batching

PROMPT = "Hello there, how are you today? Fine."  # 37 characters, 37 tokens


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def ids_of(loaded, text: str) -> list[int]:
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize(("family", "attention"), [("llama", "sdpa"), ("llama", "eager"), ("gpt2", "sdpa"),
                                                   ("qwen3", "sdpa")])
def test_each_request_in_the_batch_computes_what_it_computes_alone(family, attention):
    loaded = tiny_model(family, attn_implementation=attention)
    ids = ids_of(loaded, PROMPT)
    result = run_batching(loaded, ids, requests=5, block_size=4, new_tokens=9, repeats=1)
    for request, tokens in zip(result.requests, result.batched_tokens, strict=True):
        prompt = ids[:request.prompt_tokens]
        with torch.inference_mode():  # the oracle: generate on the request alone (it stops at an EOS)
            generated = loaded.model.generate(torch.tensor([prompt]), max_new_tokens=request.new_tokens,
                                              do_sample=False)[0, len(prompt):].tolist()
        assert tokens[:len(generated)] == tuple(generated)
    assert result.same_tokens
    assert result.max_abs_diff < 1e-5 * max(1.0, result.max_abs_logit)
    assert [len(tokens) for tokens in result.batched_tokens] == [2, 5, 8, 9, 9]
    assert model_unchanged(loaded, attention)


def model_unchanged(loaded, attention: str) -> bool:
    return loaded.model.config._attn_implementation == attention and not loaded.model.training


def test_the_measured_packed_input_is_the_hand_count(llama):
    """20 tokens, R = 4: requests of 5, 10, 15, 20 tokens generating 2, 5, 8, 8; step 3 packs request 1's
    and 2's decode tokens beside request 3's 20-token prefill: [1, 22, d], cu_seqlens (0, 1, 2, 22)."""
    ids = ids_of(llama, PROMPT[:20])
    result = run_batching(llama, ids, requests=4, block_size=4, new_tokens=8, repeats=1)
    d = DIMS["hidden_size"]
    assert result.packed_shapes == tuple((1, n, d) for n in (5, 11, 16, 22, 3, 3, 2, 2, 2, 2, 1))
    assert result.layouts[3].cu_seqlens == (0, 1, 2, 22) and result.layouts[3].padded_tokens == 60
    assert result.bytes_per_position == 2 * DIMS["num_hidden_layers"] * DIMS["num_key_value_heads"] * DIMS["head_dim"] * 4
    assert result.tables[2].block_tables[2][:2] == (0, 1)  # request 0's pages, freed after step 1, reused


def test_bad_input_is_refused_with_a_message(llama):
    ids = ids_of(llama, PROMPT)
    params = LAB["batching"].params
    with pytest.raises(PromptError, match="Requests R must be 3 to 4 here"):
        read_params(params, {"requests": 6}, hosted=True)
    with pytest.raises(PromptError, match="Max new tokens a request must be 1 to 16 here"):
        read_params(params, {"new_tokens": 17}, hosted=True)
    with pytest.raises(PromptError, match="3 to 8 requests, not 9"):
        run_batching(llama, ids, requests=9)
    with pytest.raises(PromptError, match="The prompt has 2 tokens: 3 requests"):
        run_batching(llama, ids[:2], requests=3)
    shape_only = type(llama)(**{**llama.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_batching(shape_only, ids)
