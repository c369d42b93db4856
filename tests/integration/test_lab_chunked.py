"""Chunked prefill on tiny models: the chunks' logits equal transformers' plain forward over the whole
prompt, their greedy tokens equal `generate`'s, each chunk's measured shapes are [1, C, d] in and a
cache grown by C, each chunk's estimated FLOPs are what FlopCounterMode counts, and bad input is
refused with a message."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model
from torch.utils.flop_counter import FlopCounterMode
from transformers import DynamicCache

from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError, SessionStateError
from explorer.lab.chunked import chunk_cost, plan_chunks
from explorer.runner.lab.chunked import GREEDY_TOKENS, _chunked_prefill, run_chunked

PROMPT = "Hello there, how are you today?"  # 31 characters: 31 tokens


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def ids_of(loaded, text: str) -> list[int]:
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen3"])
def test_chunks_compute_what_one_plain_forward_computes(family):
    """Every position's logits of the chunks (C = 7: 7, 7, 7, 7, 3) against transformers' plain
    forward over the whole prompt without a cache, and the greedy tokens against `generate`."""
    loaded = tiny_model(family)
    model, ids = loaded.model, ids_of(loaded, PROMPT)
    with torch.inference_mode():
        plain = model(torch.tensor([ids])).logits[0]  # [T, V]: the oracle
        chunked = torch.cat(_chunked_prefill(model, ids, plan_chunks(len(ids), 7), DynamicCache(config=model.config))[0])
        generated = model.generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS, do_sample=False,
                                   min_new_tokens=GREEDY_TOKENS)[0, len(ids):].tolist()
    assert chunked.shape == plain.shape and (chunked - plain).abs().max() < 1e-5
    result = run_chunked(loaded, ids, chunk=7, repeats=1)
    assert result.full_tokens == result.chunked_tokens == tuple(generated)
    assert result.max_abs_diff < 1e-4 * max(1.0, result.max_abs_logit) and result.last_abs_diff <= result.max_abs_diff
    assert result.pieces[:len(ids)] == tuple(PROMPT)


def test_each_chunk_s_measured_shapes_are_c_in_and_a_cache_grown_by_c(llama):
    ids = ids_of(llama, PROMPT)
    result = run_chunked(llama, ids, chunk=7, repeats=2)
    d, h_kv, d_h = 48, 2, 10  # tests/tiny_models.py
    assert [chunk.input_shape for chunk in result.chunks] == [(1, 7, d)] * 4 + [(1, 3, d)]
    assert [chunk.kv_shape for chunk in result.chunks] == [(1, h_kv, n, d_h) for n in (7, 14, 21, 28, 31)]
    assert [chunk.band for chunk in result.chunks] == [(7, 7), (7, 14), (7, 21), (7, 28), (3, 31)]
    assert result.full_input_shape == (1, 31, d) and all(chunk.ms > 0 for chunk in result.chunks)
    assert not llama.model.get_input_embeddings()._forward_hooks  # the hook is gone


@pytest.mark.parametrize("size, count", [(1, 31), (0, 1), (100, 1)])
def test_chunks_of_one_token_and_of_all_of_them(llama, size, count):
    result = run_chunked(llama, ids_of(llama, PROMPT), chunk=size, repeats=1)
    assert len(result.chunks) == count and result.chunks[-1].context == 31
    assert result.same_tokens and result.max_abs_diff < 1e-5
    if size == 1:  # a decode step's shape: 2 FLOPs a weight over its 4 bytes in the run's float32
        assert result.dtype == "float32" and result.chunks[0].cost.gemm_intensity == pytest.approx(0.5, rel=0.05)


def test_each_chunk_s_estimated_flops_are_the_flops_torch_counts():
    """Each chunk of 6 on an eager model: the cost model's matmul FLOPs equal FlopCounterMode's count,
    its weight GEMMs' FLOPs the count of aten.mm (the projections, MLP and LM head; attention's are
    aten.bmm)."""
    model = tiny_model("llama", attn_implementation="eager").model
    ids, cache = list(range(3, 23)), DynamicCache(config=model.config)
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    for start, tokens in plan_chunks(len(ids), 6):
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            model(torch.tensor([ids[start:start + tokens]]), cache=cache, use_cache=True)
        counts = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
        cost = chunk_cost(spec, tokens, start + tokens)
        assert cost.gemm_flops == counts["aten.mm"]
        assert counter.get_total_flops() == cost.gemm_flops + counts["aten.bmm"] < cost.flops


def test_bad_input_is_refused_with_a_message(llama):
    ids = ids_of(llama, PROMPT)
    with pytest.raises(PromptError, match="chunk size must be 0 .* not -1"):
        run_chunked(llama, ids, chunk=-1)
    with pytest.raises(PromptError, match="into 620 chunks; the lab runs at most 512"):
        run_chunked(llama, ids * 20, chunk=1)
    with pytest.raises(PromptError, match="1 to 2048 tokens, not 0"):
        run_chunked(llama, [], chunk=4)
    shape_only = type(llama)(**{**llama.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_chunked(shape_only, ids)
