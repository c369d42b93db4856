"""FlashAttention's tiles: one query row of a real step's attention computed block by block over the
keys with the online softmax, so that the row's n scores (a layer's [h_q, T, n]) are never held whole.
The online softmax itself (numpy), the result of running it on the model (`explorer.runner.lab.tiles`),
its lines for the CLI and its lesson text.

The online softmax (Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018; as
FlashAttention-2 runs it, Dao 2023, Algorithm 1): for key block j with scores s_j = q·K_jᵀ · scale,

    m_j = max(m_{j-1}, max s_j)                               the running max
    l_j = exp(m_{j-1} - m_j) · l_{j-1} + Σ exp(s_j - m_j)      the running sum
    õ_j = exp(m_{j-1} - m_j) · õ_{j-1} + exp(s_j - m_j) · V_j   the rescaled partial output

and the row's output is õ_last / l_last = softmax(q·Kᵀ · scale) · V, the same maths reduced in another
order (equal within floating-point rounding, not bit for bit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from explorer.figures.theme import si_text
from explorer.lab.prefix import shape_text

COMPONENTS = 3  # the partial output's first components kept per block for the figure


@dataclass(frozen=True)
class OnlineSoftmax:
    """The online softmax of one query row after each key block (`online_softmax`).

    Attributes:
        block_max: [blocks] max s_j, each block's largest score.
        running_max: [blocks] m_j (non-decreasing).
        running_sum: [blocks] l_j, Σ exp(s - m_j) over the keys seen so far.
        partial_output: [blocks, d_h] õ_j / l_j, the output were the row to end after block j
            (the last is the row's output).
    """

    block_max: np.ndarray
    running_max: np.ndarray
    running_sum: np.ndarray
    partial_output: np.ndarray

    @property
    def output(self) -> np.ndarray:
        """[d_h]: the row's output, õ_last / l_last."""
        return self.partial_output[-1]


def scores_of(query: np.ndarray, keys: np.ndarray, scale: float, softcap: float | None = None) -> np.ndarray:
    """q·Kᵀ · scale, soft-capped (Gemma 2: tanh(s / c) · c) where `softcap` is given.

    Args:
        query: [d_h], one query row after RoPE.
        keys: [n, d_h], the keys it attends to.

    Returns:
        [n] in the inputs' dtype.
    """
    scores = (keys @ query) * keys.dtype.type(scale)
    return scores if softcap is None else np.tanh(scores / softcap) * keys.dtype.type(softcap)


def online_softmax(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float, block: int,
                   softcap: float | None = None) -> OnlineSoftmax:
    """softmax(q·Kᵀ · scale) · V for one query row, `block` keys at a time, each block's scores
    computed from its own keys and dropped after it (the module's recurrence), in the inputs' dtype
    (float32, as a kernel's accumulators).

    Args:
        query: [d_h], one query row after RoPE.
        keys, values: [n, d_h], n >= 1, the keys and values the row attends to (GQA: its KV head's).
        block: B_c, keys per block; the last block holds n mod B_c where that is not 0.

    Raises:
        ValueError: `block` < 1, or no keys.
    """
    if block < 1 or len(keys) == 0:
        raise ValueError(f"The online softmax needs a block of at least 1 key and at least one key, "
                         f"not block {block} over {len(keys)} keys.")
    dtype = keys.dtype.type
    running_max, running_sum = dtype(-np.inf), dtype(0)
    accumulator = np.zeros(values.shape[1], keys.dtype)
    steps = []
    for first in range(0, len(keys), block):
        scores = scores_of(query, keys[first:first + block], scale, softcap)  # [B_c]
        new_max = max(running_max, scores.max())
        rescale = np.exp(running_max - new_max)  # 0 for the first block (exp(-inf))
        weights = np.exp(scores - new_max)  # [B_c]
        running_sum = rescale * running_sum + weights.sum()
        accumulator = rescale * accumulator + weights @ values[first:first + block]  # [d_h]
        running_max = new_max
        steps.append((scores.max(), running_max, running_sum, accumulator / running_sum))
    block_max, maxima, sums, partial = zip(*steps, strict=True)
    return OnlineSoftmax(np.array(block_max), np.array(maxima), np.array(sums), np.stack(partial))


def direct_attention(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float,
                     softcap: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The row as eager attention computes it: every score at once, softmax, then P·V.

    Args:
        query: [d_h]; keys, values: [n, d_h].

    Returns:
        (probabilities [n], summing to 1; output [d_h]), in the inputs' dtype.
    """
    scores = scores_of(query, keys, scale, softcap)
    weights = np.exp(scores - scores.max())
    probs = weights / weights.sum()
    return probs, probs @ values


@dataclass(frozen=True)
class TilesResult:
    """One query row of one layer's attention in the prompt's prefill, computed two ways from the
    model's own query, keys and values: block by block (`online_softmax`) and all at once
    (`direct_attention`, eager attention's order).

    Attributes:
        prompt_tokens: T, the prefill's query rows.
        position: the query row's position, 0..T-1; it attends to keys 0..position (causal mask).
        layer, layers: the layer shown, of L.
        head, query_heads: the query head shown, of h_q.
        kv_head, kv_heads: the KV head it reads (GQA: head // (h_q / h_kv)), of h_kv.
        head_dim: d_h.
        block: B_c, keys per block.
        scale: the scores' factor (1 / sqrt(d_h) for most families).
        query_piece: the query token's text.
        scores: [n] the row's scores q·Kᵀ · scale, n = position + 1 (computed from the measured
            query and keys; the figure draws them, a kernel never holds them all).
        block_max, running_max, running_sum: [blocks] after each block (computed, `OnlineSoftmax`).
        partial_norm: [blocks] |õ_j / l_j|, the partial output's norm (computed).
        partial_error: [blocks] max |õ_j / l_j - o| against the row's final output (computed).
        partial_components: [blocks, COMPONENTS] the partial output's first components (computed).
        online_output, direct_output: [d_h] the row's output each way (computed, float32).
        direct_probs: [n] the direct softmax (computed, float32).
        element_bytes: bytes of one score in the model's dtype.
        device, dtype: where the model ran and its dtype.
    """

    prompt_tokens: int
    position: int
    layer: int
    layers: int
    head: int
    query_heads: int
    kv_head: int
    kv_heads: int
    head_dim: int
    block: int
    scale: float
    query_piece: str
    scores: np.ndarray
    block_max: np.ndarray
    running_max: np.ndarray
    running_sum: np.ndarray
    partial_norm: np.ndarray
    partial_error: np.ndarray
    partial_components: np.ndarray
    online_output: np.ndarray
    direct_output: np.ndarray
    direct_probs: np.ndarray
    element_bytes: int
    device: str
    dtype: str

    @property
    def keys(self) -> int:
        """n, the keys the row attends to."""
        return len(self.scores)

    @property
    def blocks(self) -> int:
        return len(self.running_max)

    @property
    def online_probs(self) -> np.ndarray:
        """[n] each key's probability from the final running max and sum: exp(s - m) / l (computed)."""
        return np.exp(self.scores - self.running_max[-1]) / self.running_sum[-1]

    @property
    def max_abs_diff(self) -> float:
        """max |o_online - o_direct| over d_h (computed; float32 rounding of the same maths)."""
        return float(np.abs(self.online_output - self.direct_output).max())

    @property
    def max_abs_prob_diff(self) -> float:
        """max |p_online - p_direct| over the n keys (computed)."""
        return float(np.abs(self.online_probs - self.direct_probs).max())

    @property
    def max_abs_output(self) -> float:
        return float(np.abs(self.direct_output).max())

    @property
    def equal(self) -> bool:
        """Whether the two ways agree within float32 rounding: 1e-5 of the output's scale."""
        return self.max_abs_diff <= 1e-5 * max(1.0, self.max_abs_output) and self.max_abs_prob_diff <= 1e-5

    @property
    def tile_shape(self) -> tuple[int, int, int]:
        """[h_q, B_r, B_c]: one tile of scores per query head, B_r query rows taken equal to B_c
        (square tiles), each at most T."""
        side = min(self.block, self.prompt_tokens)
        return self.query_heads, side, side

    @property
    def scores_bytes(self) -> int:
        """The layer's [h_q, T, T] prefill scores that eager attention materialises (computed)."""
        return self.query_heads * self.prompt_tokens * self.prompt_tokens * self.element_bytes

    @property
    def tile_bytes(self) -> int:
        """What the tiles hold at once instead: one B_r x B_c tile per query head (computed)."""
        return math.prod(self.tile_shape) * self.element_bytes

    def lines(self) -> list[str]:
        """The CLI's table: a row per block (at most 12 shown), then the equality and the memory."""
        shown = _shown_blocks(self.blocks)
        rows = [f"layer {self.layer} of {self.layers}, query head {self.head} of {self.query_heads} (KV head "
                f"{self.kv_head} of {self.kv_heads}), query position {self.position} ({self.query_piece!r}; counted "
                f"from 0) of {self.prompt_tokens} over n = {self.keys} keys in {blocks_text(self.blocks)} of B_c = {self.block} "
                f"({self.device}, {self.dtype})",
                f"{'block':>6} {'keys':>11} {'block max':>10} {'m (max)':>10} {'l (sum)':>12} {'|o_j|':>9} "
                f"{'max |o_j - o|':>14}   (all computed)"]
        for index in shown:
            first, last = index * self.block, min((index + 1) * self.block, self.keys) - 1
            rows.append(f"{index:>6} {f'{first}-{last}':>11} {self.block_max[index]:>10.4g} "
                        f"{self.running_max[index]:>10.4g} {self.running_sum[index]:>12.6g} "
                        f"{self.partial_norm[index]:>9.4g} {self.partial_error[index]:>14.3g}")
        if len(shown) < self.blocks:
            rows.insert(2 + len(shown) // 2, f"{'...':>6} ({self.blocks - len(shown)} blocks not listed)")
        rows += [f"online row = eager row: max |Δo| {self.max_abs_diff:.2g} (largest |o| "
                 f"{self.max_abs_output:.3g}), max |Δp| {self.max_abs_prob_diff:.2g}: "
                 f"{'equal within float32 rounding' if self.equal else 'DIFFERENT'}",
                 f"never materialised: the layer's scores {shape_text((self.query_heads, self.prompt_tokens, self.prompt_tokens))} "
                 f"= {si_text(self.scores_bytes, 'B')} against one tile per head "
                 f"{shape_text(self.tile_shape)} = {si_text(self.tile_bytes, 'B')} "
                 f"(computed, {self.element_bytes} bytes a score)"]
        return rows


def blocks_text(blocks: int) -> str:
    """"1 block", "3 blocks"."""
    return f"{blocks} block{'s' if blocks != 1 else ''}"


def _rises_text(raised: int, blocks: int) -> str:
    """How often the running max rose after the first block, as a sentence."""
    if blocks == 1:
        return "Here every key fits in one block, so nothing was rescaled:"
    return f"Here the max rose in **{raised}** of the {blocks - 1} blocks after the first;"


def _shown_blocks(blocks: int, limit: int = 12) -> list[int]:
    """The blocks the CLI lists: all up to `limit`, else the first and last `limit` / 2."""
    if blocks <= limit:
        return list(range(blocks))
    return list(range(limit // 2)) + list(range(blocks - limit // 2, blocks))


def lesson_text(result: TilesResult) -> str:
    """The lesson page: what each block did to the running max, sum and output, and what it saved."""
    r = result
    raised = int(np.count_nonzero(np.diff(r.running_max) > 0))
    return (
        f"**FlashAttention's tiles.** The query at position {r.position} of your prompt (counted from 0), in layer {r.layer}'s head {r.head}, "
        f"attends to **{r.keys}** keys. Eager attention computes all {r.keys} scores, takes their softmax and "
        f"then the weighted sum of the values. The tiled kernel reads the keys **{r.block} at a time** "
        f"({blocks_text(r.blocks)}) and keeps only three things per row: the running max m, the running sum l of "
        f"exp(score - m) and the partial output õ. When a block holds a score above m, l and õ are "
        f"multiplied by exp(m_old - m_new) before the block is added. {_rises_text(raised, r.blocks)} "
        f"m ended at {r.running_max[-1]:.4g} with l = "
        f"{r.running_sum[-1]:.6g} (computed). "
        f"After the last block õ / l {'equals' if r.equal else 'DIFFERS from'} the eager row: max |Δ| "
        f"**{r.max_abs_diff:.1g}** (largest |o| "
        f"{r.max_abs_output:.3g}), and exp(s - m) / l gives each key's softmax probability to "
        f"{r.max_abs_prob_diff:.1g}: the same maths added up in another order. "
        f"Over the whole prefill, this layer's scores {shape_text((r.query_heads, r.prompt_tokens, r.prompt_tokens))} "
        f"would take **{si_text(r.scores_bytes, 'B')}** (computed, {r.element_bytes} bytes a score) and grow as "
        f"T²; the tiles hold {shape_text(r.tile_shape)} = "
        f"**{si_text(r.tile_bytes, 'B')}** at a time, whatever the length, in the GPU's on-chip memory. "
        "That, not fewer FLOPs, is what FlashAttention saves: the trips of the score matrix to and from HBM."
    )
