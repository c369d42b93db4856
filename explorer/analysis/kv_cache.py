"""Size of the KV cache: per token and per sequence, per layer and in total.

Each layer stores one key and one value vector of h_kv * d_h elements per position, so a token costs
2 * h_kv * d_h * bytes(kv dtype) per layer (docs/concepts.md, "kv_cache_write"). A sliding-window layer
keeps at most its window of positions, as engines that evict outside the window do (vLLM, and
transformers' `DynamicSlidingWindowLayer` keeps window - 1 plus the step's new ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from explorer.analysis.precision import DTYPE_BITS, canonical_dtype
from explorer.analysis.spec import ModelSpec


@dataclass(frozen=True)
class KVCacheSize:
    """The KV cache of a batch of sequences at one context length.

    Attributes:
        per_layer_bytes: bytes held by each layer's K and V, for the whole batch.
        positions_per_layer: positions each layer holds (n, or its window where smaller).
        total_bytes: sum over layers.
    """

    per_layer_bytes: tuple[int, ...]
    positions_per_layer: tuple[int, ...]
    total_bytes: int


def _bytes(elements: int, kv_dtype: str) -> int:
    return math.ceil(elements * DTYPE_BITS[canonical_dtype(kv_dtype)] / 8)


def kv_bytes_per_token_per_layer(spec: ModelSpec, kv_dtype: str = "bf16") -> int:
    """2 * h_kv * d_h * bytes: one position's K and V in one layer.

    Raises:
        ConfigError: unknown dtype.
    """
    return _bytes(2 * spec.kv_size, kv_dtype)


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str = "bf16") -> int:
    """Bytes one more position adds over all L layers while the context is within every window.

    E.g. Llama-3-8B in bf16: 2 * 8 * 128 * 2 B * 32 layers = 131,072 B.
    """
    return kv_bytes_per_token_per_layer(spec, kv_dtype) * spec.n_layers


def kv_cache_size(spec: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "bf16") -> KVCacheSize:
    """The KV cache of `batch` sequences of `context` positions; sliding-window layers capped.

    Args:
        spec: the model.
        context: n, positions per sequence (>= 0).
        batch: B, sequences.
        kv_dtype: format of the cache.

    Raises:
        ConfigError: unknown dtype.
        ValueError: negative context or batch.
    """
    if context < 0 or batch < 0:
        raise ValueError(f"context ({context}) and batch ({batch}) must be >= 0.")
    positions = tuple(min(context, spec.window(i) or context) for i in range(spec.n_layers))
    per_layer = tuple(_bytes(2 * spec.kv_size * batch * held, kv_dtype) for held in positions)
    return KVCacheSize(per_layer_bytes=per_layer, positions_per_layer=positions, total_bytes=sum(per_layer))
