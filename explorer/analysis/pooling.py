"""Attention probabilities summed over blocks of tokens, the way the attention view pools a long
matrix: first each query row's mass on each block of keys (`key_block_mass`), then the mean of those
over each block of query rows (`pool_rows`). Blocks are aligned on absolute positions 0, f, 2f, ...

The first stage is what a long step's attention is reduced to as it is computed, a block of query
rows at a time (`explorer.runner.gqa.recompute_probs`), so that a 8,192-token prefill's [h_q, T, T]
matrix (2.4 GB in float32) is never held whole: its key masses are [h_q, T, ceil(T / f)].
"""

from __future__ import annotations

import numpy as np


def key_blocks(n: int, factor: int) -> int:
    """How many blocks of `factor` keys cover positions 0..n-1."""
    return -(-n // factor)


def key_block_mass(probs: np.ndarray, factor: int, offset: int = 0) -> np.ndarray:
    """Each query row's summed probability on each block of `factor` keys.

    Args:
        probs: [..., rows, kv] float32, finite (a masked key holds 0); its keys are the absolute
            positions offset..offset + kv - 1 (a sliding-window layer's decode row holds its last keys).
        factor: keys per block, >= 1.
        offset: the absolute position of the first key.

    Returns:
        [..., rows, ceil((offset + kv) / factor)] float32; the blocks before `offset` hold 0.
    """
    n = offset + probs.shape[-1]
    starts = np.arange(0, n, factor)
    if offset:
        padded = np.zeros((*probs.shape[:-1], n), np.float32)
        padded[..., offset:] = probs
        probs = padded
    return np.add.reduceat(probs, starts, axis=-1).astype(np.float32, copy=False)


def query_block_starts(first: int, rows: int, factor: int, own_rows: int = 0) -> np.ndarray:
    """Row indices (0..rows-1) where a block of query rows starts, the rows being the absolute positions
    first..first + rows - 1; pooled (factor > 1), the last `own_rows` rows make one block of their own."""
    positions = np.arange(first, first + rows)
    own = first + rows - own_rows
    aligned = (positions % factor == 0) & ((positions < own) | (factor == 1))
    return np.flatnonzero(aligned | (positions == first) | (positions == own))


def pool_rows(mass: np.ndarray, n: int, factor: int, own_rows: int = 0) -> np.ndarray:
    """The pooled matrix from query rows' key-block masses: each cell the mass a block's queries put on
    a block of keys, averaged over the block's queries.

    Args:
        mass: [rows, key blocks] float32 (`key_block_mass`), the rows being the last `rows` of n positions.
        n: the context length.
        factor: tokens per block (of queries, as of keys).
        own_rows: the newest rows (0..rows) that make a block apart from the ones before.

    Returns:
        [query blocks, key blocks] float32; NaN where no query of the block sees a key of the block
        (causally: the key block starts after the query block's last position).
    """
    rows = mass.shape[0]
    starts = query_block_starts(n - rows, rows, factor, own_rows)
    sizes = np.diff(np.append(starts, rows))[:, None]
    pooled = np.add.reduceat(mass, starts, axis=0) / sizes
    last_position = n - rows + np.append(starts[1:], rows) - 1  # of each query block
    visible = np.arange(mass.shape[1])[None, :] * factor <= last_position[:, None]
    return np.where(visible, pooled, np.nan).astype(np.float32)


def matrix_part(probs: np.ndarray, rows: tuple[int, int] | None = None, key_factor: int = 1) -> np.ndarray:
    """Query rows `rows` (first, last + 1; all by default) of a step's attention block [h_q, q_len, kv]
    float32, as probabilities, or with `key_factor` > 1 as their key-block masses (`key_block_mass`,
    blocks aligned on the block's first key): what `explorer.run.AttentionSource.probs` returns."""
    part = probs if rows is None else probs[:, rows[0]:rows[1]]
    return part if key_factor == 1 else key_block_mass(part, key_factor)


def stack_key_masses(prefill: np.ndarray, decode: list[np.ndarray], factor: int) -> np.ndarray:
    """The stacked causal matrix's key-block masses (the first stage of pooling it) from the prefill's
    and each decode step's own.

    Args:
        prefill: [h_q, T, ceil(T / factor)] float32, the prefill's key-block masses.
        decode: decode step k's probabilities [h_q, 1, kv_k] float32 (its keys the last kv_k of T + k).
        factor: keys per block.

    Returns:
        [h_q, T + K, ceil((T + K) / factor)] float32 (K decode steps); blocks a row does not reach hold 0.
    """
    heads, prompt, _ = prefill.shape
    size = prompt + len(decode)
    stacked = np.zeros((heads, size, key_blocks(size, factor)), np.float32)
    stacked[:, :prompt, :prefill.shape[2]] = prefill
    for k, block in enumerate(decode, start=1):
        n = prompt + k
        row = key_block_mass(block[:, 0], factor, offset=n - block.shape[2])
        stacked[:, n - 1, :row.shape[1]] = row
    return stacked
