"""Self-speculative decoding on tiny models: its tokens equal `generate`'s greedy tokens, the draft's
logits are the residual stream after layer k read through the final norm and LM head (transformers'
own `output_hidden_states`), each verify pass runs [1, g + 1, d] on the cache the accepted tokens
left, the sampling rule on a tiny model's two distributions samples the full model's, the model is
left as it was, and bad input is refused with a message."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from chi_square import chi_square, chi_square_critical, spec_draws
from tiny_models import tiny_model

from explorer.errors import PromptError, SessionStateError
from explorer.lab.params import read_params
from explorer.lab.table import LAB
from explorer.runner.lab.common import forward, new_cache
from explorer.runner.lab.speculative import draft_forward, run_speculative

PROMPT = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def ids_of(loaded, text: str) -> list[int]:
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize(("family", "depth", "guesses"), [("llama", 1, 4), ("llama", 2, 2), ("gpt2", 2, 3),
                                                          ("qwen3", 1, 8)])
def test_the_tokens_are_plain_greedy_decodings(family, depth, guesses):
    loaded = tiny_model(family)
    ids = ids_of(loaded, PROMPT)
    result = run_speculative(loaded, ids, depth=depth, guesses=guesses, tokens=20, repeats=1)
    with torch.inference_mode():  # the oracle: transformers' own greedy generate
        generated = loaded.model.generate(torch.tensor([ids]), max_new_tokens=20, min_new_tokens=20,
                                          do_sample=False)[0, len(ids):].tolist()
    assert result.tokens == result.plain_tokens == tuple(generated)
    emitted = [token for r in result.rounds for token in r.emitted]
    assert tuple(emitted[:19]) == result.tokens[1:]  # the rounds' tokens follow the prefill's
    config = loaded.model.config
    d = getattr(config, "hidden_size", None) or config.n_embd
    context, decoded = len(ids), 1  # before each round: the prompt and every token decoded but the last in cache
    for r in result.rounds:
        assert len(r.guesses) == min(guesses, 20 - decoded) and r.verify_input_shape == (1, len(r.guesses) + 1, d)
        assert r.context == context + len(r.guesses) + 1 and 0 <= r.accepted <= len(r.guesses)
        assert r.guesses[:r.accepted] == r.emitted[:-1]
        context, decoded = context + len(r.emitted), decoded + len(r.emitted)


def test_the_draft_reads_the_residual_stream_after_layer_k(llama):
    """The draft's logits equal the hidden state after layer k (transformers' `output_hidden_states`)
    through the final norm and LM head, and its cache holds only its k layers."""
    model, ids = llama.model, ids_of(llama, PROMPT)
    with torch.inference_mode():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[2][0]  # after layers 0, 1
        oracle = model.lm_head(model.model.norm(hidden))
        cache = new_cache(model)
        drafted = draft_forward(model, ids, cache, depth=2)
    assert torch.allclose(drafted, oracle, atol=1e-5)
    assert [layer.get_seq_length() for layer in cache.layers] == [len(ids), len(ids), 0]


def test_the_rule_on_a_tiny_models_distributions_samples_the_full_model(llama):
    """p: the full model's next-token distribution (101 tokens), q: the 1-layer draft's; 20,000 seeded
    draws of the rule fit p (chi-square, small bins merged) and the draft's own guesses do not."""
    model, ids = llama.model, ids_of(llama, PROMPT)
    with torch.inference_mode():
        p = torch.softmax(forward(model, ids, None)[-1].double() * 8, -1).numpy()  # sharpened: a few likely tokens
        q = torch.softmax(draft_forward(model, ids, new_cache(model), depth=1)[-1].double() * 8, -1).numpy()
    p, q = p / p.sum(), q / q.sum()
    counts, _ = spec_draws(p, q, 20_000, seed=2)
    statistic, df = chi_square(counts, p)
    assert statistic < chi_square_critical(df)
    guesses = np.bincount(np.random.default_rng(2).choice(len(q), size=20_000, p=q), minlength=len(q))
    assert chi_square(guesses, p)[0] > chi_square_critical(df)


def test_the_model_is_left_as_it_was(llama):
    model, ids = llama.model, ids_of(llama, PROMPT)
    hooks = [dict(layer._forward_hooks) for layer in model.model.layers]  # transformers' own, if any
    with torch.inference_mode():
        before = forward(model, ids, None)
    run_speculative(llama, ids, depth=2, guesses=3, tokens=6, repeats=1)
    assert [dict(layer._forward_hooks) for layer in model.model.layers] == hooks
    with torch.inference_mode():
        assert torch.equal(forward(model, ids, None), before)


def test_the_verify_pass_reads_the_weights_once_for_its_rows(llama):
    """Estimated bytes: a verify pass of g + 1 rows costs far less than g + 1 decode steps."""
    result = run_speculative(llama, ids_of(llama, PROMPT), depth=2, guesses=4, tokens=10, repeats=1)
    first = result.rounds[0]
    assert first.decode_bytes < first.verify_bytes < 2 * first.decode_bytes < 5 * first.decode_bytes
    assert 0 < first.draft_bytes < 4 * first.decode_bytes


def test_bad_input_is_refused_with_a_message(llama):
    ids = ids_of(llama, PROMPT)
    with pytest.raises(PromptError, match="depth k must be 1 to 2.*L = 3 layers.*not 3"):
        run_speculative(llama, ids, depth=3)
    with pytest.raises(PromptError, match="L = 3 layers.*not 12"):
        run_speculative(llama, ids)  # the default depth, for the 30-layer embedded model
    with pytest.raises(PromptError, match="at least 1"):
        run_speculative(llama, ids, depth=1, guesses=0)
    with pytest.raises(PromptError, match="1 to 2048 tokens, not 0"):
        run_speculative(llama, [], depth=1)
    shape_only = type(llama)(**{**llama.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_speculative(shape_only, ids, depth=1)
    params = LAB["speculative"].params
    with pytest.raises(PromptError, match="Guesses per round g must be 1 to 8, not 9"):
        read_params(params, {"guesses": 9})
    with pytest.raises(PromptError, match="1 to 32 here"):
        read_params(params, {"tokens": 33}, hosted=True)
