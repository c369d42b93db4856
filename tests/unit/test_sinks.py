"""Attention sink importance on hand-built probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.analysis.sinks import SinkSummary, first_token_column_sum, key_importance
from explorer.figures.attention import stack_attention


def causal(rng, heads: int, n: int, sink: float = 0.0) -> np.ndarray:
    """[heads, n, n] causal rows summing to 1, each putting at least `sink` on key 0."""
    raw = np.tril(rng.random((heads, n, n)))
    probs = raw / raw.sum(-1, keepdims=True) * (1 - sink)
    probs[..., 0] += sink
    return probs.astype(np.float32)


def test_importance_is_the_mean_over_the_queries_that_see_the_key():
    probs = np.array([[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]], np.float32)
    np.testing.assert_allclose(key_importance(probs), [[(1 + 0.5 + 0.2) / 3, (0.5 + 0.3) / 2, 0.5]])


def test_importance_times_the_query_count_sums_to_the_number_of_queries():
    # every row sums to 1, so the column sums (importance x (n - k)) add up to n for each head
    probs = causal(np.random.default_rng(0), heads=5, n=13)
    importance = key_importance(probs)
    np.testing.assert_allclose((importance * (13 - np.arange(13))).sum(-1), np.full(5, 13.0))
    assert importance.shape == (5, 13) and (importance[:, -1] == probs[:, -1, -1]).all()


def test_masked_nan_counts_as_zero():
    probs = causal(np.random.default_rng(1), 2, 6)
    masked = probs.copy()
    masked[:, np.triu(np.ones((6, 6), bool), 1)] = np.nan
    np.testing.assert_array_equal(key_importance(masked), key_importance(probs))


def test_step_sums_give_the_stacked_matrixs_first_token_importance():
    rng = np.random.default_rng(2)
    prefill = causal(rng, 4, 7, sink=0.5)
    rows = [causal(rng, 4, 7 + k, sink=0.2)[:, -1:] for k in range(1, 4)]  # decode rows over 8, 9, 10 keys
    stacked = stack_attention([prefill, *rows])
    sums = [first_token_column_sum(block, 7 + k) for k, block in enumerate([prefill, *rows])]
    np.testing.assert_allclose(np.sum(sums, axis=0) / 10, key_importance(stacked)[:, 0])


def test_a_window_that_dropped_the_first_key_adds_nothing():
    block = causal(np.random.default_rng(3), 3, 5)[:, -1:]  # 5 keys kept of a 9-token context
    assert (first_token_column_sum(block, 9) == 0).all()


@pytest.mark.parametrize("threshold, share, per_layer", [(0.3, 3 / 6, [1, 2]), (0.05, 1.0, [3, 3]),
                                                         (0.95, 0.0, [0, 0])])
def test_the_share_of_pairs_over_the_threshold(threshold, share, per_layer):
    summary = SinkSummary(np.array([[0.9, 0.1, 0.2], [0.31, 0.6, 0.3]]), threshold)
    assert summary.share == pytest.approx(share) and summary.per_layer().tolist() == per_layer
