"""FlashAttention's tiles on the loaded model: one query row of one layer's prefill attention, from the
model's own post-RoPE query and cached keys and values, computed block by block with the online
softmax and all at once as eager attention does (`explorer.lab.tiles`)."""

from __future__ import annotations

import numpy as np
import torch

from explorer.errors import PromptError
from explorer.lab.tiles import COMPONENTS, TilesResult, direct_attention, online_softmax, scores_of
from explorer.runner.hooks import StepRecorder, StopForward, tracing
from explorer.runner.lab.common import check_runnable, new_cache, pieces
from explorer.runner.loaded import LoadedModel
from explorer.runner.passes import model_pass


def run_tiles(loaded: LoadedModel, prompt_ids: list[int], block: int = 16, layer: int = 0, head: int = 0,
              position: int = -1) -> TilesResult:
    """Prefill the prompt up to `layer`'s attention, keep that layer's post-RoPE queries and cached keys
    and values, and compute query row `position` of query head `head` both ways.

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids (T of them).
        block: B_c, keys per block, >= 1 (B_c >= n: one block).
        layer: 0..L-1.
        head: the query head, 0..h_q-1; it reads KV head head // (h_q / h_kv).
        position: the query row's position, counted from 0: 0..T-1; -1: the last, which sees every key.

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt or one too long; a block under 1; a layer, head or position out of range;
            a sliding-window layer whose cache no longer holds every key the row sees.
    """
    check_runnable(loaded, prompt_ids)
    model = loaded.model
    config = model.config.get_text_config()
    layers = config.num_hidden_layers
    _check_params(block, layer, head, position, layers, config.num_attention_heads, len(prompt_ids))
    row = position if position >= 0 else len(prompt_ids) - 1
    query, keys, values, scale, softcap = _captured(loaded, prompt_ids, layer)
    query_heads, kv_heads = query.shape[0], keys.shape[0]
    kv_head = head // (query_heads // kv_heads)
    q, k, v = (tensor.float().cpu().numpy() for tensor in (query[head, row], keys[kv_head, :row + 1],
                                                            values[kv_head, :row + 1]))
    online = online_softmax(q, k, v, scale, block, softcap)
    probs, output = direct_attention(q, k, v, scale, softcap)
    return TilesResult(
        prompt_tokens=len(prompt_ids), position=row, layer=layer, layers=layers, head=head, query_heads=query_heads,
        kv_head=kv_head, kv_heads=kv_heads, head_dim=q.shape[0], block=block, scale=float(scale),
        query_piece=pieces(loaded, [prompt_ids[row]])[0], scores=scores_of(q, k, scale, softcap),
        block_max=online.block_max, running_max=online.running_max, running_sum=online.running_sum,
        partial_norm=np.linalg.norm(online.partial_output, axis=1),
        partial_error=np.abs(online.partial_output - online.output).max(axis=1),
        partial_components=online.partial_output[:, :COMPONENTS], online_output=online.output,
        direct_output=output, direct_probs=probs, element_bytes=query.element_size(),
        device=str(loaded.device), dtype=loaded.dtype)


def _check_params(block: int, layer: int, head: int, position: int, layers: int, query_heads: int,
                  tokens: int) -> None:
    """Refuse parameters this model or prompt cannot take (`run_tiles`'s PromptError)."""
    if block < 1:
        raise PromptError(f"The block size B_c must be at least 1 key, not {block}.")
    if not 0 <= layer < layers:
        raise PromptError(f"This model has {layers} layers (0 to {layers - 1}): no layer {layer}.")
    if not 0 <= head < query_heads:
        raise PromptError(f"This model has {query_heads} query heads (0 to {query_heads - 1}): no head {head}.")
    if not -1 <= position < tokens:
        raise PromptError(f"The query position must be 0 to {tokens - 1} (counted from 0 over the prompt's {tokens} "
                          f"tokens; -1: the last), not {position}.")


def _captured(loaded: LoadedModel, prompt_ids: list[int], layer: int):
    """Run the prompt's prefill until `layer`'s attention has run (`tracing`, as a recomputed step runs
    it) and return that layer's post-RoPE queries [h_q, T, d_h], its cached keys and values
    [h_kv, T, d_h] (batch row 0), the scores' scale and soft-cap.

    Raises:
        PromptError: the layer's cache holds fewer than T positions (a sliding window dropped the first).
    """
    recorder = StepRecorder(keep_attention=lambda layer, shape, query_bytes: False, stop_after_layer=layer)
    model = loaded.model
    with model_pass(model):  # one pass, traced: its attention function is the recorder's for this turn only
        cache = new_cache(model)
        with tracing(model, cache, recorder, hook_modules=False):
            try:
                model(input_ids=torch.tensor([prompt_ids], device=model.device), cache=cache, use_cache=True,
                      logits_to_keep=1)
            except StopForward:
                pass
    held = cache.layers[layer]
    if held.keys.shape[2] < len(prompt_ids):
        raise PromptError(f"Layer {layer} attends through a sliding window: its cache keeps only its last "
                          f"{held.keys.shape[2]} of the prompt's {len(prompt_ids)} positions. Choose a "
                          "full-attention layer or a shorter prompt.")
    inputs = recorder.attention_inputs[layer]
    return inputs.query, held.keys[0], held.values[0], inputs.scaling, inputs.softcap
