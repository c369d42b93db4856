"""Attention sinks, measured: how much weight each head puts on each key position, over the queries.

The importance of key position k for one head is the mean over the queries i >= k of the attention
probability A[i, k] (Gu et al., "When Attention Sink Emerges in Language Models", ICLR 2025); a head
is a sink on the first token when its importance there exceeds a threshold (0.3 in that paper). All
from the probabilities the attention view shows (`AttentionSource.probs`), with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_SINK_THRESHOLD = 0.3  # Gu et al. 2025's


def key_importance(probs: np.ndarray) -> np.ndarray:
    """Each key position's importance, per head.

    Args:
        probs: [h, n, n] float32, a causal matrix over all n queries (rows) and keys (columns), rows
            summing to 1; NaN (masked, above the diagonal) counts as 0.

    Returns:
        [h, n] float64: column k's sum over the queries i >= k, divided by their count n - k.

    Raises:
        ValueError: `probs` is not [h, n, n].
    """
    if probs.ndim != 3 or probs.shape[1] != probs.shape[2]:
        raise ValueError(f"probs must be [h, n, n], got {list(probs.shape)}.")
    n = probs.shape[-1]
    sums = np.nansum(np.tril(np.nan_to_num(probs, nan=0.0)), axis=1, dtype=np.float64)
    return sums / (n - np.arange(n))


def first_token_importance(probs: np.ndarray) -> np.ndarray:
    """`key_importance(probs)[:, 0]` without the other columns: [h] float64, each head's mean weight on
    key 0 over all n queries (NaN counts as 0)."""
    return np.nansum(probs[:, :, 0], axis=1, dtype=np.float64) / probs.shape[1]


def first_token_column_sum(probs: np.ndarray, context: int) -> np.ndarray:
    """A step's contribution to the first token's importance: [h] float64, the sum over its query
    rows of the weight on key 0.

    Args:
        probs: the step's block [h, q_len, kv_len] float32 (the prefill's [h, T, T], a decode step's
            [h, 1, kv_len]).
        context: the step's context length n; a block narrower than n (a sliding-window layer's
            last keys) no longer holds key 0 and adds 0.

    Summed over the steps up to one whose context is n and divided by n, the first token's importance
    (`key_importance(...)[:, 0]` of the stacked matrix).
    """
    if probs.shape[-1] < context:
        return np.zeros(probs.shape[0])
    return probs[..., 0].sum(axis=1, dtype=np.float64)


@dataclass(frozen=True)
class SinkSummary:
    """The first token's importance for every (layer, head) at one step, and the threshold applied.

    Attributes:
        importance: [L, h] float64, the first token's importance (mean weight over all n queries).
        threshold: a head is a sink where its importance exceeds this.
    """

    importance: np.ndarray
    threshold: float = DEFAULT_SINK_THRESHOLD

    @property
    def sinks(self) -> np.ndarray:
        """[L, h] bool: the heads over the threshold."""
        return self.importance > self.threshold

    @property
    def share(self) -> float:
        """The share of (layer, head) pairs over the threshold, 0..1."""
        return float(self.sinks.mean())

    def per_layer(self) -> np.ndarray:
        """[L] int: how many heads of each layer are over the threshold."""
        return self.sinks.sum(axis=1)
