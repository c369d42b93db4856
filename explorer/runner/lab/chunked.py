"""Chunked prefill on the loaded model (plain transformers, a hook on the embedding only to read its
output's shape): the prompt prefilled C tokens at a time on one `DynamicCache`, against one prefill
of the whole prompt (`explorer.lab.chunked`)."""

from __future__ import annotations

import statistics
import time

import torch

from explorer.analysis.spec import ModelSpec
from explorer.lab.chunked import (
    ChunkedPrefillResult,
    ChunkRecord,
    chunk_cost,
    plan_chunks,
    ridge,
)
from explorer.runner.lab.common import (
    check_runnable,
    passes_on,
    forward,
    greedy,
    median_ms,
    new_cache,
    output_shapes,
    pieces,
)
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import waited_s

GREEDY_TOKENS = 8  # the continuation compared


def run_chunked(loaded: LoadedModel, prompt_ids: list[int], chunk: int = 16, repeats: int = 3) -> ChunkedPrefillResult:
    """Prefill `prompt_ids` in chunks of `chunk` tokens on one cache, and in one pass on another;
    compare their logits at every position and their greedy continuations, and time each chunk.

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids (T of them).
        chunk: C, tokens per chunk; 0: all T in one chunk.
        repeats: chunked prefills (and one-pass prefills) timed; each chunk's median is kept.

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt, a prompt too long, a negative chunk size, or more than
            `explorer.lab.chunked.MAX_CHUNKS` chunks.
    """
    check_runnable(loaded, prompt_ids)
    plan = plan_chunks(len(prompt_ids), chunk)
    with passes_on(loaded) as model:
        embed = model.get_input_embeddings()
        with output_shapes(embed) as full_shape:
            full_cache = new_cache(model)
            full = forward(model, prompt_ids, full_cache)
        cache = new_cache(model)
        with output_shapes(embed) as chunk_shapes:
            logits, kv_shapes, first_ms = _chunked_prefill(model, prompt_ids, plan, cache)
        chunked = torch.cat(logits)  # [T, V]
        full_tokens = greedy(model, full_cache, full[-1], GREEDY_TOKENS, loaded.eos_token_ids)
        chunked_tokens = greedy(model, cache, chunked[-1], GREEDY_TOKENS, loaded.eos_token_ids)
        times = [first_ms] + [_chunked_prefill(model, prompt_ids, plan, new_cache(model))[2]
                              for _ in range(repeats - 1)]
        (full_ms,) = median_ms([lambda: forward(model, prompt_ids, new_cache(model))], repeats)
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    chunk_ms = [statistics.median(runs) for runs in zip(*times, strict=True)]  # each chunk's median
    chunks = tuple(ChunkRecord(start, shape, kv, ms, chunk_cost(spec, tokens, start + tokens, loaded.dtype))
                   for (start, tokens), shape, kv, ms in zip(plan, chunk_shapes, kv_shapes, chunk_ms, strict=True))
    on_gpu = loaded.device.startswith("cuda")
    ridge_hardware, ridge_flops_per_byte = ridge(torch.cuda.get_device_name(loaded.device) if on_gpu else None,
                                                 loaded.dtype)
    return ChunkedPrefillResult(
        requested_chunk=chunk, chunks=chunks, full_input_shape=full_shape[0], full_ms=full_ms,
        full_cost=chunk_cost(spec, len(prompt_ids), len(prompt_ids), loaded.dtype), repeats=repeats,
        max_abs_diff=float((chunked - full).abs().max()), last_abs_diff=float((chunked[-1] - full[-1]).abs().max()),
        max_abs_logit=float(full.abs().max()), full_tokens=tuple(full_tokens), chunked_tokens=tuple(chunked_tokens),
        pieces=pieces(loaded, prompt_ids + full_tokens + chunked_tokens), ridge_hardware=ridge_hardware,
        ridge_flops_per_byte=ridge_flops_per_byte, device=str(loaded.device), dtype=loaded.dtype)


def _chunked_prefill(model, prompt_ids: list[int], plan: list[tuple[int, int]], cache):
    """Run each chunk of `plan` on `cache` in order.

    Returns:
        (each chunk's logits [C, V] float32, layer 0's key shape [1, h_kv, n, d_h] after each chunk,
        each chunk's wall time in ms (measured; the device synchronised; its wait for a turn left out)).
    """
    logits, kv_shapes, times_ms = [], [], []
    for start, tokens in plan:
        began, waited = time.perf_counter(), waited_s()
        logits.append(forward(model, prompt_ids[start:start + tokens], cache))  # its .cpu() waits for the device
        times_ms.append((time.perf_counter() - began - (waited_s() - waited)) * 1e3)  # its wait for a turn left out
        kv_shapes.append(tuple(cache.layers[0].keys.shape))
    return logits, kv_shapes, times_ms
