"""KV eviction on the loaded model (`explorer.lab.evict`): the shipped text prefilled for its first few
tokens, then fed one token at a time (teacher-forced) on a `DynamicCache` cut back to W positions after
every step by index selection along its position axis.

Positions: each kept key stays rotated by RoPE at the position it was cached with, and each new token
gets its position in the original text (`position_ids` passed explicitly: StreamingLLM's "positions as
in the original text" variant, not its re-numbering within the cache). No attention mask is passed: the
new token sees every kept key.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from transformers import DynamicCache

from explorer.analysis.spec import ModelSpec
from explorer.errors import PromptError
from explorer.lab.evict import (
    FULL,
    POLICIES,
    EvictResult,
    PolicyRun,
    bytes_per_position,
    kept_indices,
    nll_per_position,
)
from explorer.runner.lab.common import check_runnable, exclusive, forward, new_cache, pieces, text_ids
from explorer.runner.loaded import LoadedModel

PREFILL_TOKENS = 8  # the text's first tokens prefilled at once (at most W of them)


def run_evict(loaded: LoadedModel, prompt_ids: list[int], window: int = 32, sinks: int = 4,
              text_tokens: int = 96) -> EvictResult:
    """Decode the shipped text with the full cache (one plain forward) and with each rule of `POLICIES`
    holding W positions; the shared model is only read ("h2o" switches its attention to eager and back).

    Args:
        loaded: a model with real weights.
        prompt_ids: the prompt's token ids (checked, not scored: the experiment scores the shipped text).
        window: W, the positions the cache keeps.
        sinks: S, the first positions "sinks" keeps, 0 <= S < W.
        text_tokens: the shipped text's first tokens decoded (at most the model's context); more than W.

    Raises:
        SessionStateError: shape-only mode.
        PromptError: W < 1, S outside 0..W - 1, or a text no longer than W (nothing would be evicted).
    """
    check_runnable(loaded, prompt_ids)
    if window < 1:
        raise PromptError(f"The window W must hold at least 1 position, not {window}.")
    if not 0 <= sinks < window:
        raise PromptError(f"The sinks S must be 0 to W - 1 = {window - 1} (S = W leaves no recent position), "
                          f"not {sinks}.")
    text = text_ids(loaded, text_tokens)
    if len(text) <= window:
        raise PromptError(f"The text's {len(text)} tokens fit in the window W = {window}: nothing would be evicted. "
                          f"Lower W below {len(text)} or score more text tokens.")
    with exclusive(loaded) as model:
        reference = forward(model, text, None).numpy()
        per_position = kv_bytes_per_position(model)
        runs = [_scored(FULL, reference, reference, text, np.arange(len(text)), len(text), per_position)]
        for policy in POLICIES:
            logits, kept, lengths = evicted_decode(model, text, policy, window, sinks)
            runs.append(_scored(policy, logits, reference, text, kept[-1], max(lengths), per_position))
    return EvictResult(
        text_tokens=len(text), window=window, sinks=sinks, heavy=window // 2,
        prefill_tokens=min(PREFILL_TOKENS, window), bytes_per_position=per_position, runs=tuple(runs),
        first_text="".join(pieces(loaded, text[:sinks])), device=str(loaded.device), dtype=loaded.dtype)


def evicted_decode(model, ids: list[int], policy: str, window: int,
                   sinks: int) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """Prefill `ids`' first min(PREFILL_TOKENS, W) tokens, then feed the rest one at a time, cutting the
    cache back to the positions `kept_indices` names after every pass (without autograd; hold the model's
    lock, `exclusive`, where others share it).

    Args:
        ids: T token ids; position t's logits predict ids[t + 1].
        policy: one of `POLICIES` ("h2o" runs with eager attention, to read the attention weights).

    Returns:
        logits: [T, V] float32, one row per position (measured).
        kept: after each pass, the original positions the cache holds, ascending.
        lengths: after each pass, the cache's length (`DynamicCache.get_seq_length`).
    """
    decode = lambda: _decode(model, ids, policy, window, sinks)  # noqa: E731
    return _with_eager(model, decode) if policy == "h2o" else decode()


@torch.inference_mode()
def _decode(model, ids: list[int], policy: str, window: int, sinks: int):
    cache = new_cache(model)
    prefill = min(PREFILL_TOKENS, window, len(ids))
    chunks = [(0, ids[:prefill])] + [(t, [ids[t]]) for t in range(prefill, len(ids))]
    positions, scores = np.zeros(0, dtype=np.int64), np.zeros(0)
    rows, kept, lengths = [], [], []
    for start, chunk in chunks:
        where = torch.arange(start, start + len(chunk), device=model.device)[None]
        out = model(input_ids=torch.tensor([chunk], device=model.device), position_ids=where, cache=cache,
                    use_cache=True, output_attentions=policy == "h2o")
        rows.append(out.logits[0].float().cpu().numpy())
        positions = np.concatenate([positions, np.arange(start, start + len(chunk))])
        scores = np.concatenate([scores, np.zeros(len(chunk))])
        if policy == "h2o":
            scores += received_attention(out.attentions)
        keep = kept_indices(policy, positions, window, sinks, scores)
        if len(keep) < len(positions):
            select(cache, keep)
            positions, scores = positions[keep], scores[keep]
        kept.append(positions.copy())
        lengths.append(cache.get_seq_length())
    return np.concatenate(rows), kept, lengths


def received_attention(attentions: tuple[torch.Tensor, ...]) -> np.ndarray:
    """The attention each key received in one pass, summed over layers, heads and queries.

    Args:
        attentions: one [1, h_q, q, n] float tensor a layer (the softmaxed weights).

    Returns:
        [n] float64.
    """
    return sum(layer[0].double().sum(dim=(0, 1)).cpu() for layer in attentions).numpy()


def select(cache: DynamicCache, keep: np.ndarray) -> None:
    """Keep only the positions `keep` ([n'] indices along the position axis) in every layer's keys and
    values ([B, h_kv, n, d_h] -> [B, h_kv, n', d_h]), in place."""
    for layer in cache.layers:
        index = torch.as_tensor(keep, device=layer.keys.device)
        layer.keys = layer.keys.index_select(-2, index)
        layer.values = layer.values.index_select(-2, index)


def kv_bytes_per_position(model) -> int:
    """2·L·h_kv·d_h·bytes of one cached position, in the model's dtype (computed from its config)."""
    spec = ModelSpec.from_hf_config(model.config.to_dict())
    return bytes_per_position(spec.n_layers, spec.n_kv_heads, spec.head_dim, model.dtype.itemsize)


def _with_eager(model, run: Callable[[], tuple]) -> tuple:
    """`run()` with the model's attention switched to eager (which returns its weights), switched back after."""
    previous = model.config._attn_implementation
    try:
        model.set_attn_implementation("eager")
        return run()
    finally:
        model.set_attn_implementation(previous)


def _scored(name: str, logits: np.ndarray, reference: np.ndarray, text: list[int], kept: np.ndarray, held: int,
            per_position: int) -> PolicyRun:
    agrees = np.argmax(logits[:-1], axis=-1) == np.argmax(reference[:-1], axis=-1)
    return PolicyRun(name=name, nll=tuple(float(x) for x in nll_per_position(logits, text)),
                     agrees=tuple(bool(x) for x in agrees), kept=tuple(int(p) for p in kept),
                     held_positions=held, cache_bytes=held * per_position)
