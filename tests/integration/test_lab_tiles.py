"""FlashAttention's tiles on tiny models: the tiled row's probabilities equal transformers' eager
attention weights (output_attentions=True), its output equals the head's slice of the eager attention
output (the O projection's input), GQA reads KV head head // g, the scores counted are the size of the
eager weights tensor, the model is left as it was, and bad input is refused with a message."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import tiny_model

from explorer.errors import PromptError, SessionStateError
from explorer.runner.lab.tiles import run_tiles

PROMPT = "Tiles of keys, one block at a time!"  # 35 characters: 35 tokens


def ids_of(loaded, text: str) -> list[int]:
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


def eager_oracle(family: str, ids: list[int], layer: int) -> tuple[np.ndarray, np.ndarray]:
    """transformers' eager attention on the same tiny model (same seed, same weights): layer's
    probabilities [h_q, T, T] and the attention output that enters the O projection [T, h_q * d_h]."""
    model = tiny_model(family, attn_implementation="eager").model
    attention = model.transformer.h[layer].attn if family == "gpt2" else model.model.layers[layer].self_attn
    projection = attention.c_proj if family == "gpt2" else attention.o_proj
    captured = []
    handle = projection.register_forward_pre_hook(lambda _module, args: captured.append(args[0][0]))
    try:
        with torch.inference_mode():
            out = model(torch.tensor([ids]), output_attentions=True)
    finally:
        handle.remove()
    return out.attentions[layer][0].numpy(), captured[0].numpy()


@pytest.mark.parametrize("family, kv_head", [("llama", 1), ("qwen3", 1), ("gpt2", 4)])
def test_the_tiled_row_is_transformers_eager_row(family, kv_head):
    """Query head 4 of 6: with h_kv = 2 (g = 3) it reads KV head 4 // 3 = 1 (not 4 mod 2 = 0); GPT-2
    (MHA) reads head 4."""
    loaded = tiny_model(family)
    ids = ids_of(loaded, PROMPT)
    result = run_tiles(loaded, ids, block=4, layer=1, head=4)
    probs, attention_output = eager_oracle(family, ids, 1)
    head_dim = result.head_dim
    assert result.kv_head == kv_head and result.keys == len(ids) == 35 and result.blocks == 9
    np.testing.assert_allclose(result.online_probs, probs[4, -1], atol=1e-6)
    np.testing.assert_allclose(result.online_output, attention_output[-1, 4 * head_dim:5 * head_dim], atol=1e-6)
    assert result.equal and result.max_abs_diff < 1e-6
    assert result.scores_bytes == probs.nbytes  # the [h_q, T, T] float32 tensor eager materialised


@pytest.mark.parametrize("block", [1, 7, 35, 100])
def test_any_block_size_gives_the_eager_row_and_an_earlier_row_sees_only_its_keys(block):
    loaded = tiny_model("llama")
    ids = ids_of(loaded, PROMPT)
    result = run_tiles(loaded, ids, block=block, layer=2, head=0, position=19)
    probs, attention_output = eager_oracle("llama", ids, 2)
    assert result.position == 19 and result.keys == 20 and result.blocks == -(-20 // block)
    np.testing.assert_allclose(result.online_probs, probs[0, 19, :20], atol=1e-6)
    assert probs[0, 19, 20:].max() == 0  # the causal mask: the keys the tiles never read
    np.testing.assert_allclose(result.online_output, attention_output[19, :result.head_dim], atol=1e-6)
    np.testing.assert_allclose(result.partial_components[-1], result.online_output[:3])
    assert result.partial_error[-1] == 0


def test_the_model_is_left_as_it_was():
    loaded = tiny_model("llama")
    ids = ids_of(loaded, PROMPT)
    implementation = loaded.model.config._attn_implementation
    with torch.inference_mode():
        before = loaded.model(torch.tensor([ids])).logits
    first = run_tiles(loaded, ids, block=5, layer=0, head=3)
    second = run_tiles(loaded, ids, block=5, layer=0, head=3)
    with torch.inference_mode():
        assert torch.equal(loaded.model(torch.tensor([ids])).logits, before)
    assert loaded.model.config._attn_implementation == implementation
    np.testing.assert_array_equal(first.online_output, second.online_output)


def test_a_sliding_window_layer_works_within_its_window_and_is_refused_past_it():
    """Gemma 3's tiny model: window 7 on its layers, so the cache keeps the last 6 positions."""
    loaded = tiny_model("gemma3_text")
    short = ids_of(loaded, "Tiles!")
    result = run_tiles(loaded, short, block=4, layer=0, head=2)
    probs, _ = eager_oracle("gemma3_text", short, 0)
    np.testing.assert_allclose(result.online_probs, probs[2, -1], atol=1e-6)
    with pytest.raises(PromptError, match="sliding window: its cache keeps only its last 6 of the prompt's 35"):
        run_tiles(loaded, ids_of(loaded, PROMPT), layer=0)


def test_bad_input_is_refused_with_a_message():
    loaded = tiny_model("llama")
    ids = ids_of(loaded, PROMPT)
    for params, message in (({"block": 0}, "block size B_c must be at least 1 key, not 0"),
                            ({"layer": 3}, "This model has 3 layers \\(0 to 2\\): no layer 3"),
                            ({"head": 6}, "This model has 6 query heads \\(0 to 5\\): no head 6"),
                            ({"position": 35}, "query position must be 0 to 34 \\(counted from 0"),
                            ({"position": -2}, "-1: the last\\), not -2")):
        with pytest.raises(PromptError, match=message):
            run_tiles(loaded, ids, **params)
    with pytest.raises(PromptError, match="1 to 2048 tokens, not 0"):
        run_tiles(loaded, [])
    shape_only = type(loaded)(**{**loaded.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_tiles(shape_only, ids)


@pytest.mark.real_model
def test_the_embedded_models_tiled_row_is_its_eager_row(embedded_model):
    """SmolLM2-135M (h_q 9, h_kv 3): query head 7 reads KV head 2; 64 keys in blocks of 16."""
    ids = ids_of(embedded_model, "The quick brown fox jumps over the lazy dog. " * 6)[:64]
    result = run_tiles(embedded_model, ids, block=16, layer=5, head=7)
    model = embedded_model.model
    implementation = model.config._attn_implementation
    try:
        model.config._attn_implementation = "eager"  # output_attentions needs eager's weights
        with torch.inference_mode():
            probs = model(torch.tensor([ids]), output_attentions=True, logits_to_keep=1).attentions[5][0, 7, -1]
    finally:
        model.config._attn_implementation = implementation
    assert result.kv_head == 2 and result.blocks == 4 and result.equal
    np.testing.assert_allclose(result.online_probs, probs.float().numpy(), atol=1e-5)
