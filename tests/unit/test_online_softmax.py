"""The online softmax against the direct one on random rows (any block size, scores too large for a
plain exp), the memory counted by hand, and the result's lines, lesson and figure from a hand-built run."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.figures.lab.tiles import fig_tiles
from explorer.lab.tiles import COMPONENTS, TilesResult, direct_attention, lesson_text, online_softmax, scores_of


def random_row(seed: int, keys: int, head_dim: int, dtype=np.float32, spread: float = 1.0):
    rng = np.random.default_rng(seed)
    return tuple((rng.standard_normal(shape) * spread).astype(dtype)
                 for shape in ((head_dim,), (keys, head_dim), (keys, head_dim)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), keys=st.integers(1, 70), head_dim=st.integers(1, 9),
       block=st.integers(1, 80), scale=st.floats(0.05, 2.0))
def test_the_online_softmax_equals_the_direct_one_for_any_block(seed, keys, head_dim, block, scale):
    query, k, v = random_row(seed, keys, head_dim)
    online = online_softmax(query, k, v, scale, block)
    probs, output = direct_attention(query, k, v, scale)
    scores = scores_of(query, k, scale)
    assert len(online.running_max) == -(-keys // block)  # ceil(n / B_c) blocks
    np.testing.assert_allclose(online.output, output, atol=1e-6)
    np.testing.assert_allclose(np.exp(scores - online.running_max[-1]) / online.running_sum[-1], probs, atol=1e-6)
    # a block's q·Kᵀ is a GEMV of another shape than the whole row's: equal to its last bits, not bit for bit
    assert online.running_max[-1] == pytest.approx(scores.max(), rel=1e-6, abs=1e-7)
    np.testing.assert_array_equal(online.running_max, np.maximum.accumulate(online.block_max))


@pytest.mark.parametrize("block", [1, 5, 64, 65, 1000])
def test_in_float64_the_two_orders_agree_to_its_rounding(block):
    query, k, v = random_row(7, 64, 8, np.float64)
    online = online_softmax(query, k, v, 0.3, block)
    np.testing.assert_allclose(online.output, direct_attention(query, k, v, 0.3)[1], atol=1e-14)
    assert online.partial_output.shape == (-(-64 // block), 8)


def test_scores_whose_exp_overflows_are_handled_by_the_running_max():
    """Scores near 1000: exp overflows float32 (above ~88), so the row is right only because every
    exponential is taken after subtracting the max so far."""
    query, k, v = random_row(3, 40, 4, spread=20.0)
    online = online_softmax(query, k, v, 1.0, 8)
    assert scores_of(query, k, 1.0).max() > 200 and np.isfinite(online.output).all()
    np.testing.assert_allclose(online.output, direct_attention(query, k, v, 1.0)[1], atol=1e-5)


def test_the_soft_cap_applies_to_each_block_s_scores():
    query, k, v = random_row(4, 30, 6, spread=3.0)
    online = online_softmax(query, k, v, 1.0, 7, softcap=5.0)
    assert online.running_max[-1] <= 5.0
    np.testing.assert_allclose(online.output, direct_attention(query, k, v, 1.0, softcap=5.0)[1], atol=1e-6)


def test_a_block_under_one_key_is_refused():
    query, k, v = random_row(0, 4, 2)
    with pytest.raises(ValueError, match="block of at least 1 key"):
        online_softmax(query, k, v, 1.0, 0)


def hand_result(keys: int = 30, block: int = 8, tokens: int = 40) -> TilesResult:
    query, k, v = random_row(11, keys, 10)
    online = online_softmax(query, k, v, 0.5, block)
    probs, output = direct_attention(query, k, v, 0.5)
    return TilesResult(
        prompt_tokens=tokens, position=keys - 1, layer=2, layers=3, head=5, query_heads=6, kv_head=1, kv_heads=2,
        head_dim=10, block=block, scale=0.5, query_piece=" <b>", scores=scores_of(query, k, 0.5),
        block_max=online.block_max, running_max=online.running_max, running_sum=online.running_sum,
        partial_norm=np.linalg.norm(online.partial_output, axis=1),
        partial_error=np.abs(online.partial_output - online.output).max(axis=1),
        partial_components=online.partial_output[:, :COMPONENTS], online_output=online.output,
        direct_output=output, direct_probs=probs, element_bytes=2, device="cpu", dtype="bfloat16")


def test_the_memory_counted_is_the_layer_s_scores_against_one_tile_per_head():
    result = hand_result()
    assert result.scores_bytes == 6 * 40 * 40 * 2  # [h_q, T, T] scores of the prefill, 2 bytes each
    assert result.tile_shape == (6, 8, 8) and result.tile_bytes == 6 * 8 * 8 * 2
    assert hand_result(block=64).tile_shape == (6, 40, 40)  # a tile is at most the prompt


def test_the_lines_and_lesson_give_the_run_s_numbers():
    result = hand_result(keys=200, block=8)
    lines = result.lines()
    assert "25 blocks of B_c = 8" in lines[0] and "KV head 1 of 2" in lines[0]
    assert sum(bool(re.match(r" +\d+ +\d+-\d+ ", line)) for line in lines) == 12 and "13 blocks not listed" in "\n".join(lines)
    assert "equal within float32 rounding" in lines[-2] and "[6, 40, 40] = 19.2 kB" in lines[-1]
    assert result.equal and result.keys == 200 and result.blocks == 25
    lesson = lesson_text(result)
    assert "**8 at a time**" in lesson and "25 blocks" in lesson and "19.2 kB" in lesson
    assert "nothing was rescaled" in lesson_text(hand_result(keys=5, block=8))


def test_the_figure_draws_the_strip_and_says_whether_the_rows_agree():
    result = hand_result()
    fig = fig_tiles(result)
    assert fig.layout.meta == {"view": "lab-tiles", "step": None} and fig.layout.height <= 560
    bars, running_max = fig.data[0], fig.data[1]
    assert len(bars.x) == result.keys and list(running_max.y[:-1]) == list(result.running_max)
    assert list(running_max.x) == [-0.5, 7.5, 15.5, 23.5, 29.5]  # each block's keys, 30 keys by 8
    assert "equal to the eager row" in fig.layout.title.text and "&lt;b&gt;" in fig.layout.title.text
    assert len(fig.data) == 4 + 2 * COMPONENTS
