"""KV eviction on tiny models: each rule's cache holds exactly the positions it names after every step;
the evicted decode equals transformers' own full-cache decode with the evicted positions masked out; a
window as long as the text equals the plain forward; the shared model's logits unchanged bit for bit;
perplexity and bytes equal independent computations; a long prompt decoded in place of the shipped
text; the first tokens' attention equal to the eager weights'; bad input refused with a message."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import tiny_model

from explorer.errors import PromptError, SessionStateError
from explorer.lab.evict import OWN_PROMPT, PROMPT_PAST_WINDOW, lesson_text
from explorer.lab.fidelity import TEXT_SOURCE, shipped_text
from explorer.runner.lab.evict import PREFILL_TOKENS, evicted_decode, evicted_decodes, run_evict

PROMPT = "Hello there"
TEXT_TOKENS = 40


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def text_of(loaded, n: int = TEXT_TOKENS) -> list[int]:
    return loaded.tokenizer(shipped_text(), add_special_tokens=False)["input_ids"][:n]


@pytest.mark.parametrize(("policy", "rule"), [
    ("window", lambda t, w, s: list(range(max(0, t + 1 - w), t + 1))),
    ("sinks", lambda t, w, s: list(range(t + 1)) if t < w else [*range(s), *range(t + 1 - (w - s), t + 1)]),
])
def test_each_step_keeps_exactly_the_positions_its_rule_names(llama, policy, rule):
    _, kept, lengths = evicted_decode(llama.model, text_of(llama), policy, 12, 3)
    ends = [PREFILL_TOKENS - 1, *range(PREFILL_TOKENS, TEXT_TOKENS)]  # the last position fed by each pass
    assert [positions.tolist() for positions in kept] == [rule(t, 12, 3) for t in ends]
    assert lengths == [min(t + 1, 12) for t in ends]


def test_h2o_keeps_the_recent_half_and_as_many_older_positions(llama):
    before = llama.model.config._attn_implementation
    _, kept, lengths = evicted_decode(llama.model, text_of(llama), "h2o", 12, 3)
    assert llama.model.config._attn_implementation == before
    for t, positions in zip(range(PREFILL_TOKENS, TEXT_TOKENS), kept[1:], strict=True):
        assert len(positions) == min(t + 1, 12) and set(range(max(0, t - 5), t + 1)) <= set(positions.tolist())
    assert max(lengths) == 12


def masked_oracle(model, ids: list[int], kept: list[np.ndarray]) -> torch.Tensor:
    """transformers' full cache, one token a pass after the same prefill, the positions evicted before each
    pass masked out by a 2-D attention mask: the logits eviction must reproduce."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    rows = [model(torch.tensor([ids[:PREFILL_TOKENS]]), cache=cache).logits[0]]
    for t, visible in zip(range(PREFILL_TOKENS, len(ids)), kept, strict=False):
        mask = torch.zeros(1, t + 1, dtype=torch.long)
        mask[0, [*visible.tolist(), t]] = 1
        rows.append(model(torch.tensor([[ids[t]]]), attention_mask=mask, cache=cache).logits[0])
    return torch.cat(rows)


@pytest.mark.parametrize("policy", ["window", "sinks"])
def test_evicted_decode_equals_the_full_cache_with_the_evicted_positions_masked(llama, policy):
    ids = text_of(llama)
    logits, kept, _ = evicted_decode(llama.model, ids, policy, 12, 3)
    with torch.inference_mode():
        oracle = masked_oracle(llama.model, ids, kept)
    assert np.allclose(logits, oracle.numpy(), atol=1e-5)
    assert not np.allclose(logits, llama.model(torch.tensor([ids])).logits[0].detach().numpy(), atol=1e-3)


@pytest.mark.parametrize("policy", ["window", "sinks", "h2o"])
def test_a_window_as_long_as_the_text_equals_the_plain_forward(llama, policy):
    ids = text_of(llama, 20)
    with torch.inference_mode():
        logits, _, lengths = evicted_decode(llama.model, ids, policy, 20, 3)
        plain = llama.model(torch.tensor([ids])).logits[0].numpy()
    assert np.allclose(logits, plain, atol=1e-5) and lengths[-1] == 20


def test_shared_model_unchanged_perplexity_and_bytes_independent(llama):
    ids = torch.tensor([text_of(llama)])
    with torch.inference_mode():
        before = llama.model(ids).logits
    result = run_evict(llama, [5, 6], window=12, sinks=3, text_tokens=TEXT_TOKENS)
    with torch.inference_mode():
        after = llama.model(ids).logits
        logits, _, _ = evicted_decode(llama.model, ids[0].tolist(), "sinks", 12, 3)
    assert torch.equal(after, before)
    full, sinks = result.run("full cache"), result.run("sinks")
    assert full.perplexity() == pytest.approx(math.exp(F.cross_entropy(before[0, :-1], ids[0, 1:]).item()), rel=1e-5)
    log_p = logits[:-1] - logits[:-1].max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p.astype(np.float64)).sum(-1, keepdims=True))
    numpy_ppl = np.exp(-log_p[np.arange(TEXT_TOKENS - 1), ids[0, 1:].numpy()].mean())
    assert sinks.perplexity() == pytest.approx(numpy_ppl, rel=1e-6)
    # 2·L·h_kv·d_h·4 bytes = 2·3·2·10·4 = 480 a position: the cache's own tensors
    from transformers import DynamicCache
    cache = DynamicCache(config=llama.model.config)
    with torch.inference_mode():
        llama.model(ids, cache=cache)
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert result.bytes_per_position == 480 == held // TEXT_TOKENS and sinks.cache_bytes == 12 * 480
    assert sinks.kept[:3] == (0, 1, 2) and full.top1() == 1.0 and result.text_tokens == TEXT_TOKENS


def test_bad_input_is_refused_with_a_message(llama):
    with pytest.raises(PromptError, match="at least 1 position"):
        run_evict(llama, [5], window=0)
    with pytest.raises(PromptError, match="S = W leaves no recent position"):
        run_evict(llama, [5], window=8, sinks=8)
    with pytest.raises(PromptError, match="leave no prediction past the window W = 64"):
        run_evict(llama, [5], window=64, text_tokens=30)
    # W = T - 1: the last prediction is at T - 2 < W, so nothing is scored past W (it printed nan)
    with pytest.raises(PromptError, match="lower W to at most 28 or decode at least 31 text tokens"):
        run_evict(llama, [5], window=29, text_tokens=30)
    with pytest.raises(PromptError, match="one rotary position embedding"):
        run_evict(tiny_model("gpt2"), [5], window=10, text_tokens=30, positions=1)
    shape_only = type(llama)(**{**llama.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_evict(shape_only, [5])


def test_the_figure_table_and_lesson_say_what_was_measured(llama):
    from explorer.figures.lab.evict import fig_evict
    result = run_evict(llama, [5], window=10, sinks=2, text_tokens=30)
    fig = fig_evict(result)
    assert fig.layout.meta == {"view": "lab-evict", "step": None} and fig.layout.height <= 560
    assert "(measured)" in fig.layout.title.text and "W = 10" in fig.layout.title.text
    strips = [trace for trace in fig.data if trace.mode == "markers"]
    assert [tuple(trace.x) for trace in strips] == [run.kept for run in result.runs[1:]]
    text = "\n".join(result.lines()) + lesson_text(result)
    assert "positions as cached" in text and "first 2 tokens" in text and "H2O" in text
    assert "counted from 0" in text and "not StreamingLLM's rule" in text


def test_w_equal_t_minus_two_scores_its_one_prediction_past_w(llama):
    result = run_evict(llama, [5], window=28, sinks=2, text_tokens=30)
    assert all(math.isfinite(run.perplexity(28)) for run in result.runs)


def test_renumbering_moves_no_relative_distance_of_a_contiguous_window(llama):
    """RoPE scores depend on a query's and a key's distance only: for the window rule (contiguous keys)
    renumbering inside the cache changes no distance, so its logits equal those kept as cached; the sinks
    rule's gap between the sinks and the window shrinks, so its logits move. Every renumbered cache's keys
    sit at 0..n-1: re-rotating them back by their original positions' difference gives the as-cached keys."""
    text = text_of(llama)
    cached = evicted_decodes(llama.model, text, ("window", "sinks"), 12, 3)
    renumbered = evicted_decodes(llama.model, text, ("window", "sinks"), 12, 3, renumber=True)
    np.testing.assert_allclose(renumbered["window"][0], cached["window"][0], atol=2e-5)
    assert np.abs(renumbered["sinks"][0] - cached["sinks"][0]).max() > 1e-3
    assert [list(k) for k in renumbered["sinks"][1]] == [list(k) for k in cached["sinks"][1]]  # same positions kept
    result = run_evict(llama, [5], window=12, sinks=3, text_tokens=TEXT_TOKENS, positions=1)
    text = "\n".join(result.lines()) + lesson_text(result)
    assert result.positions == "renumbered" and "renumbered inside the cache, as StreamingLLM does" in text
    from explorer.figures.lab.evict import fig_evict
    assert "positions renumbered inside the cache (StreamingLLM)" in fig_evict(result).layout.title.text


def test_the_lesson_escapes_the_first_tokens_text(llama):
    from dataclasses import replace

    result = replace(run_evict(llama, [5], window=10, sinks=2, text_tokens=30), first_text="<b>**x")
    assert "\\<b\\>\\*\\*x" in lesson_text(result)


def test_a_long_prompt_is_decoded_in_place_of_the_shipped_text(llama):
    prompt = llama.tokenizer("the quick brown fox jumps over the lazy dog; " * 3, add_special_tokens=False)["input_ids"]
    assert len(prompt) >= 12 + PROMPT_PAST_WINDOW
    result = run_evict(llama, prompt, window=12, sinks=3, text_tokens=TEXT_TOKENS)
    ids = torch.tensor([prompt[:TEXT_TOKENS]])
    with torch.inference_mode():
        logits = llama.model(ids).logits[0]
    assert result.source == OWN_PROMPT and result.text_tokens == TEXT_TOKENS
    assert result.run("full cache").perplexity() == pytest.approx(
        math.exp(F.cross_entropy(logits[:-1], ids[0, 1:]).item()), rel=1e-5)
    short = run_evict(llama, prompt[:12 + PROMPT_PAST_WINDOW - 1], window=12, sinks=3, text_tokens=TEXT_TOKENS)
    assert short.source == TEXT_SOURCE and "Your prompt" in lesson_text(result) and "shipped text" in lesson_text(short)


def test_the_sink_measures_equal_the_eager_attention_weights(llama):
    result = run_evict(llama, [5], window=12, sinks=3, text_tokens=TEXT_TOKENS)
    ids = torch.tensor([text_of(llama)])
    implementation = llama.model.config._attn_implementation
    llama.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            weights = torch.stack(llama.model(ids, output_attentions=True).attentions)[:, 0].double()  # [L, h, n, n]
    finally:
        llama.model.set_attn_implementation(implementation)
    first_token = weights[..., 0].mean(dim=-1)  # [L, h]: each head's mean weight on key 0 over the queries
    measures = result.sink_measures
    assert llama.model.config._attn_implementation == implementation
    assert measures.tokens == TEXT_TOKENS and measures.threshold == 0.3
    assert measures.head_share == pytest.approx((first_token > 0.3).double().mean().item())
    assert measures.first_share == pytest.approx(weights[:, :, 3:, :3].sum(-1).mean().item(), rel=1e-6)
    assert f"{measures.head_share:.0%} of the (layer, head) pairs" in "\n".join(result.lines())


def test_the_rules_decoded_side_by_side_equal_each_rule_alone(llama):
    ids = text_of(llama)
    together = evicted_decodes(llama.model, ids, ("window", "sinks", "h2o"), 12, 3)
    for policy, (logits, kept, lengths) in together.items():
        alone_logits, alone_kept, alone_lengths = evicted_decode(llama.model, ids, policy, 12, 3)
        assert np.allclose(logits, alone_logits, atol=1e-5) and lengths == alone_lengths
        assert [k.tolist() for k in kept] == [k.tolist() for k in alone_kept]
    assert together["window"][1][-1].tolist() != together["sinks"][1][-1].tolist()  # each row kept its own


def test_the_slider_shows_what_each_cache_held_after_the_pass_it_names(llama):
    from explorer.figures.lab.evict import fig_evict
    ids = text_of(llama, 30)
    result = run_evict(llama, [5], window=10, sinks=2, text_tokens=30)
    (slider,) = fig_evict(result).layout.sliders
    together = evicted_decodes(llama.model, ids, ("window", "sinks", "h2o"), 10, 2)
    assert slider.active == len(slider.steps) - 1 and slider.steps[-1].label == "29"
    for step in slider.steps:
        fed = int(step.label)  # the last position fed: pass fed - 7 (the prefill fed 0..7)
        for x, policy in zip(step.args[0]["x"], ("window", "sinks", "h2o"), strict=True):
            assert x == together[policy][1][fed - (PREFILL_TOKENS - 1)].tolist()
