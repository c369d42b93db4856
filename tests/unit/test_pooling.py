"""Pooling attention in two stages (`explorer.analysis.pooling`) against pooling the whole stacked
matrix cell by cell, the oracle: same values (to float32 rounding), same masked cells."""

from __future__ import annotations

import math

import numpy as np
import pytest

from explorer.analysis.pooling import key_block_mass, matrix_part, pool_rows, stack_key_masses
from explorer.figures.attention import attention_figure, pool_attention, pooling_factor, stack_attention, stack_rows

RNG = np.random.default_rng(0)
HEADS, KV_HEADS, PROMPT = 4, 2, 23


def causal_probs(rows: int, n: int) -> np.ndarray:
    """[HEADS, rows, n] float32, the last `rows` of n positions, each row softmax over the keys it sees."""
    scores = RNG.normal(size=(HEADS, rows, n))
    positions = np.arange(n - rows, n)[:, None]
    scores = np.where(np.arange(n)[None, :] <= positions, scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (probs / probs.sum(axis=-1, keepdims=True)).astype(np.float32)


# the prefill, then decode rows; step 2's and 4's keep only their last keys (a sliding window)
BLOCKS = [causal_probs(PROMPT, PROMPT), causal_probs(1, PROMPT + 1), causal_probs(1, 19),
          causal_probs(1, PROMPT + 3), causal_probs(1, 20)]


def naive_pool(stacked: np.ndarray, factor: int, own: int) -> np.ndarray:
    """Cell by cell: a query block's mean over its rows of each row's mass on the key block; NaN where
    no row of the block sees a key of the block."""
    rows, n = stacked.shape
    own_start = n - own
    starts = [r for r in range(rows) if (r % factor == 0 and r < own_start) or r in (0, own_start)]
    ends = [*starts[1:], rows]
    cells = np.full((len(starts), math.ceil(n / factor)), np.nan)
    for i, (first, last) in enumerate(zip(starts, ends, strict=True)):
        for j, key in enumerate(range(0, n, factor)):
            block = stacked[first:last, key:key + factor]
            if np.isfinite(block).any():
                cells[i, j] = np.nansum(block) / (last - first)
    return cells


@pytest.mark.parametrize("factor, own", [(2, 1), (5, 1), (7, 0), (30, 1)])
def test_pooling_from_key_masses_equals_pooling_the_stacked_matrix(factor, own):
    stacked = stack_attention(BLOCKS)
    n = stacked.shape[1]
    decode = [BLOCKS[k] for k in range(1, len(BLOCKS))]
    masses = stack_key_masses(key_block_mass(BLOCKS[0], factor), decode, factor)
    assert masses.shape == (HEADS, n, math.ceil(n / factor))
    for head in range(HEADS):
        oracle = naive_pool(stacked[head], factor, own)
        two_stage = pool_rows(masses[head], n, factor, own)
        np.testing.assert_array_equal(np.isnan(two_stage), np.isnan(oracle))
        np.testing.assert_allclose(two_stage, oracle, atol=1e-6, equal_nan=True)
        np.testing.assert_allclose(pool_attention(stacked[head], n, factor, own), oracle, atol=1e-6, equal_nan=True)


def test_a_decode_row_of_the_last_keys_is_placed_on_its_absolute_blocks():
    row = np.array([[[0.25, 0.5, 0.25]]], np.float32)  # keys 5, 6, 7 of 8
    assert key_block_mass(row[0], 3, offset=5).tolist() == [[0.0, 0.25, 0.75]]


def test_a_matrix_part_is_its_rows_then_their_key_masses():
    probs = BLOCKS[0]
    np.testing.assert_array_equal(matrix_part(probs, (3, 9)), probs[:, 3:9])
    np.testing.assert_allclose(matrix_part(probs, (3, 9), 4), key_block_mass(probs[:, 3:9], 4))
    assert matrix_part(probs) is probs


@pytest.mark.parametrize("average", [False, True])
def test_the_pooled_figure_from_key_masses_is_the_figure_from_the_whole_matrix(average):
    blocks = [causal_probs(200, 200), causal_probs(1, 201), causal_probs(1, 150)]
    stacked = stack_attention(blocks)
    n = stacked.shape[1]
    pieces = [f"t{i}" for i in range(n)]
    factor = pooling_factor(n, 1 if average else HEADS)
    assert factor > 1
    whole = attention_figure(stacked, pieces, KV_HEADS, layer=0, step=2, new_rows=1, average=average)
    masses = stack_key_masses(key_block_mass(blocks[0], factor), blocks[1:], factor)
    pooled = attention_figure(masses, pieces, KV_HEADS, layer=0, step=2, new_rows=1, average=average,
                              key_factor=factor)
    assert pooled.layout.title.text == whole.layout.title.text
    for a, b in zip(whole.data, pooled.data, strict=True):
        if a.type == "heatmap":
            assert a.x == b.x and a.y == b.y
            np.testing.assert_allclose(np.array(a.z, float), np.array(b.z, float), atol=1e-6, equal_nan=True)


def test_a_windows_rows_alone_draw_the_window_of_the_whole_matrix():
    stacked = stack_attention(BLOCKS)
    n = stacked.shape[1]
    pieces = [f"t{i}" for i in range(n)]
    for start, stop in [(3, 11), (20, 27), (24, 27)]:
        prefill = BLOCKS[0][:, min(start, PROMPT):min(stop, PROMPT)]
        decode = BLOCKS[max(1, start - PROMPT + 1):stop - PROMPT + 1]
        rows = stack_rows(prefill, start, decode, n)
        np.testing.assert_array_equal(rows, stacked[:, start:stop])
        whole = attention_figure(stacked, pieces, KV_HEADS, layer=0, step=4, new_rows=1, window=(start, stop))
        alone = attention_figure(rows, pieces, KV_HEADS, layer=0, step=4, new_rows=1, window=(start, stop),
                                 first_row=start)
        assert whole.to_json() == alone.to_json()
