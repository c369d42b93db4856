"""A layer's attention probabilities for a step the session did not keep: from the step's kept queries
and the cached keys where the cache still holds them, else by running the step's context again."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from explorer.analysis.pooling import matrix_part
from explorer.errors import SessionStateError
from explorer.runner.attention_store import AttentionStore
from explorer.runner.batch import Batch
from explorer.runner.gqa import recompute_probs
from explorer.runner.hooks import StepRecorder, StopForward, tracing
from explorer.runner.loaded import LoadedModel
from explorer.runner.locks import model_lock
from explorer.trace import StepTrace


def recompute_attention(loaded: LoadedModel, steps: Sequence[StepTrace], step_index: int, layer: int,
                        cache: DynamicCache | None, store: AttentionStore, batch: Batch | None, ids: list[int],
                        rows: tuple[int, int] | None = None, key_factor: int = 1) -> np.ndarray:
    """A layer's attention probabilities for step `step_index` of `steps`, or their part (`rows` and `key_factor` as
    `explorer.run.AttentionSource.probs` takes them).

    Recomputing takes the step's queries, which `store` keeps, and the keys in `cache`
    (`explorer.runner.gqa.recompute_probs`: the same values, bit for bit). Where the cache no longer
    holds every key (a sliding-window layer keeps only its last ones, or the session was closed:
    `cache` None), it runs the step's whole context (`ids`) on a fresh cache up to `layer` instead
    (`rerun_attention`); causal masking makes the step's query rows the same as in the cached pass.

    Args:
        batch: the session's batch of prompts (sequence 0's padding is masked), or None.

    Returns:
        [h_q, q_len, kv_len] float32, rows sum to 1 (prefill [h_q, T, T], decode [h_q, 1, n]), or
        its part.

    Raises:
        IndexError: no such step or layer.
        SessionStateError: in shape-only mode (there are no values).
    """
    trace = steps[step_index]
    if not 0 <= layer < len(trace.attention):
        raise IndexError(f"layer {layer} of {len(trace.attention)}")
    if loaded.shape_only:
        raise SessionStateError("Shape-only mode computes no attention values.")
    held = cache.layers[layer] if cache is not None else None
    keys = held.keys if held is not None else None
    # every position the layer has seen is held (a full sliding window holds only its last ones); a
    # step in flight may have added its own keys: only the first n are read
    if keys is not None and keys.shape[-2] == held.get_seq_length() >= trace.context_length:
        inputs = store.inputs[step_index][layer]
        mask = batch.mask[:, :trace.context_length] if batch is not None else None
        padding = mask[0] if mask is not None and not bool(mask.all()) else None  # else transformers masked none
        return recompute_probs(inputs, keys[:1, :, :trace.context_length], padding, rows, key_factor)
    return matrix_part(rerun_attention(loaded, trace, layer, batch, ids), rows, key_factor)


def rerun_attention(loaded: LoadedModel, trace: StepTrace, layer: int, batch: Batch | None,
                    ids: list[int]) -> np.ndarray:
    """Run the step's context (`ids`' first `trace.context_length`) on a fresh cache, stopping after
    `layer`'s attention, and return that step's rows of it.

    Returns:
        [h_q, q_len, kv_len] float32, rows sum to 1.
    """
    recorder = StepRecorder(stop_after_layer=layer)  # the times are not kept: no device clock
    cache = DynamicCache(config=loaded.model.config)
    inputs = {"input_ids": torch.tensor([ids[: trace.context_length]], device=loaded.device)}
    if batch is not None:  # sequence 0 alone, with its padding masked as in the batch
        inputs["attention_mask"] = batch.mask[:1, :trace.context_length].to(loaded.device)
        inputs["position_ids"] = batch.positions()[:1, :trace.context_length].to(loaded.device)
    model = loaded.model
    with model_lock(model), torch.inference_mode(), tracing(model, cache, recorder, hook_modules=False):
        try:
            model(**inputs, cache=cache, use_cache=True, logits_to_keep=1)
        except StopForward:
            pass
    recorder.finish()
    q_len, kv_len = trace.attention[layer].shape[1:]  # a sliding-window layer sees only its last kv_len keys
    return recorder.attention[layer][:, -q_len:, -kv_len:]
