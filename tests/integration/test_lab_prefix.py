"""Prefix caching on tiny models: the cached suffix's logits equal a full prefill's, its greedy tokens
equal `generate`'s, its measured shapes are the suffix's, its estimated FLOPs are what
FlopCounterMode counts, and bad input is refused with a message."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model
from torch.utils.flop_counter import FlopCounterMode
from transformers import DynamicCache

from explorer.analysis.costs import step_costs
from explorer.analysis.records import CostOptions, Step
from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError, SessionStateError
from explorer.lab.prefix import FOLLOW_UP
from explorer.runner.lab.common import pass_cost
from explorer.runner.lab.prefix import GREEDY_TOKENS, run_prefix

PROMPT = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def ids_of(loaded, text: str) -> list[int]:
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen3"])
def test_the_cached_suffix_computes_what_a_full_prefill_computes(family):
    loaded = tiny_model(family)
    ids = ids_of(loaded, PROMPT)
    result = run_prefix(loaded, ids, prefix=12, repeats=1)
    second = ids[:12] + ids_of(loaded, FOLLOW_UP)
    with torch.inference_mode():  # the oracle: transformers' own generate on request B alone
        generated = loaded.model.generate(torch.tensor([second]), max_new_tokens=GREEDY_TOKENS, do_sample=False,
                                          min_new_tokens=GREEDY_TOKENS)[0, len(second):].tolist()
    assert result.full_tokens == result.cached_tokens == tuple(generated)
    assert result.max_abs_diff < 1e-4 * max(1.0, result.max_abs_logit)
    d, t_s = loaded.model.config.hidden_size if family != "gpt2" else loaded.model.config.n_embd, len(FOLLOW_UP)
    assert result.full_input_shape == (1, 12 + t_s, d) and result.suffix_input_shape == (1, t_s, d)
    assert result.reused_kv_shape[2] == 12 and result.final_kv_shape[2] == 12 + t_s
    assert result.pieces[:12] == tuple(PROMPT[:12]) and result.suffix_tokens == t_s


def test_the_estimated_flops_are_the_flops_torch_counts(llama):
    """The analytic matmul FLOPs of the full prefill and of the suffix on a 12-position cache equal
    FlopCounterMode's count (eager attention: the score and weighted-sum matmuls are counted; the LM
    head over every position, as the experiment runs it)."""
    model = tiny_model("llama", attn_implementation="eager").model
    ids, suffix = list(range(3, 23)), list(range(30, 36))
    with torch.inference_mode(), FlopCounterMode(display=False) as full:
        model(torch.tensor([ids + suffix]), cache=DynamicCache(config=model.config), use_cache=True)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.tensor([ids]), cache=cache, use_cache=True)
        with FlopCounterMode(display=False) as cached:
            model(torch.tensor([suffix]), cache=cache, use_cache=True)
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    for counter, tokens, context in ((full, 26, 26), (cached, 6, 26)):
        costs = step_costs(spec, Step("prefill", 1, tokens, context), CostOptions(lm_head_all_positions=True))
        assert counter.get_total_flops() == sum(cost.matmul_flops for cost in costs)
    assert pass_cost(model, 6, 26)[0] < pass_cost(model, 26, 26)[0]


def test_bad_input_is_refused_with_a_message(llama):
    ids = ids_of(llama, PROMPT)
    with pytest.raises(PromptError, match="shared prefix must be 1 to 31"):
        run_prefix(llama, ids, prefix=40)
    with pytest.raises(PromptError, match="1 to 2048 tokens, not 0"):
        run_prefix(llama, [], prefix=0)
    shape_only = type(llama)(**{**llama.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_prefix(shape_only, ids)
