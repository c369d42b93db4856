"""KV eviction's pure parts: each rule's kept indices on hand-made positions and scores, the running
perplexity against a loop, the bytes formula, and bad arguments refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from explorer.lab.evict import bytes_per_position, kept_indices, nll_per_position, running_perplexity


def test_each_rule_keeps_what_it_names():
    positions = np.arange(10, 20)  # ten cached positions, original numbers 10..19
    assert kept_indices("window", positions, 4, 1).tolist() == [6, 7, 8, 9]
    assert kept_indices("sinks", positions, 4, 1).tolist() == [0, 7, 8, 9]
    scores = np.array([5, 0, 9, 1, 7, 0, 0, 0, 0, 0], dtype=float)
    assert kept_indices("h2o", positions, 6, 0, scores).tolist() == [0, 2, 4, 7, 8, 9]  # top 3 of 0..6, last 3
    assert kept_indices("sinks", positions[:3], 4, 2).tolist() == [0, 1, 2]  # no more than W: all kept


def test_bad_rules_are_refused():
    with pytest.raises(ValueError, match="0 <= S < W"):
        kept_indices("sinks", np.arange(9), 4, 4)
    with pytest.raises(ValueError, match="one accumulated score"):
        kept_indices("h2o", np.arange(9), 4, 0)


def test_running_perplexity_and_nll_match_a_loop():
    rng = np.random.default_rng(0)
    logits, tokens = rng.normal(size=(6, 11)).astype(np.float32), rng.integers(0, 11, 6)
    nll = nll_per_position(logits, tokens)
    by_hand = [-math.log(math.exp(logits[t, tokens[t + 1]]) / np.exp(logits[t].astype(float)).sum()) for t in range(5)]
    assert np.allclose(nll, by_hand)
    assert np.allclose(running_perplexity(nll), [math.exp(sum(by_hand[:k]) / k) for k in range(1, 6)])
    assert bytes_per_position(30, 3, 64, 4) == 2 * 30 * 3 * 64 * 4
