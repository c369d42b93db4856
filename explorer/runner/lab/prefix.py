"""Prefix caching on the loaded model (plain transformers, no hooks): request B reuses request A's KV
cache for the prefix they share and prefills only its own suffix (`explorer.lab.prefix`)."""

from __future__ import annotations

import copy

from explorer.errors import PromptError
from explorer.lab.prefix import FOLLOW_UP, PrefixCacheResult
from explorer.runner.lab.common import (
    check_runnable,
    passes_on,
    forward,
    greedy,
    median_ms,
    new_cache,
    output_shapes,
    pass_cost,
    pieces,
)
from explorer.runner.loaded import LoadedModel
from explorer.runner.step_order import crop_cache

GREEDY_TOKENS = 8  # the continuation compared


def run_prefix(loaded: LoadedModel, prompt_ids: list[int], prefix: int = 0, repeats: int = 3) -> PrefixCacheResult:
    """Prefill request A (`prompt_ids`), then request B = A's first `prefix` tokens + `FOLLOW_UP` two
    ways: a full prefill of B on an empty cache, and B's suffix on a copy of A's cache cropped to
    `prefix` positions; compare their logits over B's suffix and their greedy continuations.

    Args:
        loaded: a model with real weights.
        prompt_ids: request A's token ids (T_A of them).
        prefix: P, the positions shared, 1..T_A; 0: all of A (B is A's follow-up turn).
        repeats: runs timed per way (the median is kept).

    Raises:
        SessionStateError: shape-only mode.
        PromptError: no prompt, a prompt too long, or a prefix longer than it.
    """
    check_runnable(loaded, prompt_ids)
    shared = prefix or len(prompt_ids)
    if not 1 <= shared <= len(prompt_ids):
        raise PromptError(f"The shared prefix must be 1 to {len(prompt_ids)} tokens (the prompt's length), "
                          f"not {prefix}.")
    suffix = _follow_up_ids(loaded)
    second = prompt_ids[:shared] + suffix
    with passes_on(loaded) as model:
        first_cache = new_cache(model)
        forward(model, prompt_ids, first_cache)  # request A
        embed = model.get_input_embeddings()
        with output_shapes(embed) as full_shape:
            full_cache = new_cache(model)
            full = forward(model, second, full_cache)
        reused = _cropped(first_cache, shared)
        reused_kv_shape = tuple(reused.layers[0].keys.shape)
        with output_shapes(embed) as suffix_shape:
            cached = forward(model, suffix, reused)
        final_kv_shape = tuple(reused.layers[0].keys.shape)
        full_tokens = greedy(model, full_cache, full[-1], GREEDY_TOKENS, loaded.eos_token_ids)
        cached_tokens = greedy(model, reused, cached[-1], GREEDY_TOKENS, loaded.eos_token_ids)
        copies = [_cropped(first_cache, shared) for _ in range(repeats)]  # made outside the timed calls
        full_ms, suffix_ms = median_ms([lambda: forward(model, second, new_cache(model)),
                                        lambda: forward(model, suffix, copies.pop())], repeats)
    delta = (cached - full[shared:]).abs()
    return PrefixCacheResult(
        first_tokens=len(prompt_ids), prefix_tokens=shared, total_tokens=len(second),
        full_input_shape=full_shape[0], suffix_input_shape=suffix_shape[0], reused_kv_shape=reused_kv_shape,
        final_kv_shape=final_kv_shape,
        full_cost=pass_cost(model, len(second), len(second)), suffix_cost=pass_cost(model, len(suffix), len(second)),
        full_ms=full_ms, suffix_ms=suffix_ms, repeats=repeats, max_abs_diff=float(delta.max()),
        max_abs_logit=float(full[shared:].abs().max()), full_tokens=tuple(full_tokens),
        cached_tokens=tuple(cached_tokens), pieces=pieces(loaded, second + full_tokens + cached_tokens),
        device=str(loaded.device), dtype=loaded.dtype)


def _follow_up_ids(loaded: LoadedModel) -> list[int]:
    """B's own tokens: `FOLLOW_UP` as the tokenizer reads it (no special tokens); without a tokenizer
    (a shape-only model has none, and is refused before), the ids 1..8."""
    if loaded.tokenizer is None:
        return list(range(1, 9))
    return loaded.tokenizer(FOLLOW_UP, add_special_tokens=False)["input_ids"]


def _cropped(cache, positions: int):
    """A copy of `cache` cut back to its first `positions` (the timed suffix runs on a fresh copy each time)."""
    copied = copy.deepcopy(cache)
    crop_cache(copied, positions)
    return copied
