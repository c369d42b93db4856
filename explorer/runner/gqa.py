"""Eager attention's arithmetic for grouped-query attention, without repeat_kv's copy of the cache.

Query head h reads KV head h // g (g = h_q / h_kv, transformers' `repeat_kv`), so the g query heads
j·g .. j·g + g - 1 all read KV head j. Here they are one GEMM per KV head: the group's queries
[g·T, d_h] x the head's keys [d_h, n] (one batched matmul over the h_kv heads), where eager attention
(`eager_attention_forward` in modeling_llama.py) copies K and V g times and runs one GEMM per query
head. A decode step's attention is then 2 matmuls a layer, not 2·h_q GEMVs, and no copy of the cache.

Tensors in the grouped layout are [B, h_kv, g, T, ...], which is head order: a view of [B, h_q, T, ...].

The instrumented attention (`explorer.runner.hooks`) runs these on a block of query rows at a time
(`explorer.analysis.memory.block_rows`), so a layer's transient memory is bounded by the block, not
by T x n, and under a plain causal mask a block reads only the keys its rows can see (`keys_read`).
Each row's scores, softmax and weighted sum depend on that row alone, but the products are GEMMs of
other shapes than eager's, a BLAS kernel may reduce a dot product in another order for another shape,
and a row's softmax sums no exact zeros for the keys after it; so the probabilities and logits equal
eager attention's within float32 rounding, not bit for bit: asserted to 1e-6
(tests/integration/test_query_blocks.py: blocks of 1, 7 and T rows on every family's tiny model, the
measured bound in its docstring; tests/integration/test_faithfulness.py: the embedded model's logits,
of about 25, to 5e-5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from explorer.analysis.memory import block_rows
from explorer.analysis.pooling import key_block_mass, key_blocks


@dataclass(frozen=True, slots=True)
class AttentionInputs:
    """What one layer's attention probabilities are computed from, besides the cached keys.

    Attributes:
        query: [h_q, T, d_h] after RoPE (batch row 0), in the model's dtype, on its device.
        scaling: the factor the scores are multiplied by (1 / sqrt(d_h) for most families).
        softcap: Gemma-style logit soft-capping, None elsewhere.
    """

    query: torch.Tensor
    scaling: float
    softcap: float | None


@dataclass(frozen=True, slots=True)
class BlockBuffers:
    """Flat tensors that every block of a layer writes its mask, scores, probabilities and output
    into, made once for the layer: a block's tensors of several MB, made afresh, would fault in new
    pages each time (`explorer.runner.heap`). The same kernels write them (`out=`), so the values are
    the same. `NO_BUFFERS` holds None in each: every tensor is made afresh, as for a layer's one block.

    Attributes:
        scores: B x h_q x rows x n elements in the query's dtype.
        probs: as many float32 elements (the softmax's output).
        output: B x h_q x rows x d_h elements in the query's dtype.
        mask: B x rows x n elements in the query's dtype (the block's additive mask, `block_mask`).
    """

    scores: torch.Tensor | None = None
    probs: torch.Tensor | None = None
    output: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    @classmethod
    def for_blocks(cls, query: torch.Tensor, rows: int, n: int) -> BlockBuffers:
        """Buffers for blocks of up to `rows` query rows of `query` [B, h_q, T, d_h] over up to `n` keys."""
        batch, h_q, _, head_dim = query.shape
        return cls(query.new_empty(batch * h_q * rows * n), query.new_empty(batch * h_q * rows * n, dtype=torch.float32),
                   query.new_empty(batch * h_q * rows * head_dim), query.new_empty(batch * rows * n))


NO_BUFFERS = BlockBuffers()


def _into(buffer: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor | None:
    """The first elements of a flat `buffer` viewed as `shape`, or None (a new tensor) without one."""
    return None if buffer is None else buffer[:math.prod(shape)].view(shape)


def _blank(buffer: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`shape` in the flat `buffer` (`_into`), or a new tensor without one; its values unset."""
    return torch.empty(shape, dtype=dtype, device=device) if buffer is None else _into(buffer, shape)


def grouped_scores(query: torch.Tensor, key: torch.Tensor, scaling: float, softcap: float | None,
                   attention_mask: torch.Tensor | None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Q·Kᵀ · scaling (soft-capped), plus the additive mask, as eager attention computes them.

    Args:
        query: [B, h_q, T, d_h] after RoPE.
        key: [B, h_kv, n, d_h].
        attention_mask: additive float mask [B, 1, T, >= n] (0 or the dtype's minimum), or None.
        out: a flat buffer to write the scores into (`BlockBuffers.scores`), or None.

    Returns:
        [B, h_kv, g, T, n] in the query's dtype (a view of it as [B, h_q, T, n] is head order).
    """
    batch, h_q, q_len, head_dim = query.shape
    h_kv, n = key.shape[1], key.shape[2]
    group = h_q // h_kv
    # the bmm torch.matmul would reduce these 4-D operands to, called directly (fewer ops a layer)
    queries = query.reshape(batch * h_kv, group * q_len, head_dim)
    scores = torch.bmm(queries, key.reshape(batch * h_kv, n, head_dim).transpose(1, 2),
                       out=_into(out, (batch * h_kv, group * q_len, n)))
    scores = scores.view(batch, h_kv, group, q_len, n)
    scores.mul_(scaling)  # in place where eager makes a new tensor (same values)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores.add_(attention_mask[:, :, None, :, :n])
    return scores


def block_mask(mask: torch.Tensor | None, first: int, last: int, q_len: int, n: int, dtype: torch.dtype,
               device: torch.device, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """Eager attention's additive mask for query rows `first`..`last - 1`: 0 where a query attends, the
    dtype's minimum elsewhere, as transformers' `eager_mask` turns SDPA's boolean mask into one, but a
    block of rows at a time (a 8,192-token prompt's whole float mask would be 268 MB).

    Args:
        mask: SDPA's boolean mask [B, 1, T, >= n] (True: attend; padding, sliding windows), or None
            where transformers found it plain causal (`sdpa_mask`'s causal skip): query r, at position
            n - T + r, then sees keys 0..n - T + r.
        q_len: T, the step's query rows; n: the keys.
        out: a flat buffer to write the mask into (`BlockBuffers.mask`), or None.

    Returns:
        [B or 1, 1, last - first, n] in `dtype`, or None where no key of the block is masked.
    """
    if mask is None and last >= q_len and first == q_len - 1:  # the last query sees every key
        return None
    minimum = torch.finfo(dtype).min
    if mask is not None:
        allowed = mask[:, :, first:last, :n]
        return _blank(out, allowed.shape, dtype, device).fill_(minimum).masked_fill_(allowed, 0)
    return _blank(out, (1, 1, last - first, n), dtype, device).fill_(minimum).triu_(n - q_len + first + 1)


def keys_read(causal_only: bool, last: int, q_len: int, n: int) -> int:
    """How many of the n keys a block of query rows, ending before row `last` of q_len, reads.

    Under a plain causal mask (`causal_only`: transformers built none, as for one unpadded prompt) the
    block's last row, at position n - q_len + last - 1, sees the keys up to its own; every later key's
    probability is exactly 0 (the exponential of the dtype's minimum) and adds nothing to P·V, so the
    block reads only the first n - q_len + last keys (about half of a long prefill's work). Under any
    other mask (padding, a sliding window) it reads all n. Either way the values equal eager's, which
    sums those zeros too, within float32 rounding (`explorer.runner.gqa`).
    """
    return n - q_len + last if causal_only else n


def first_keys(states: torch.Tensor, count: int) -> torch.Tensor:
    """Keys or values [B, h_kv, n, d_h] cut to their first `count` positions (`keys_read`); a view."""
    return states if count == states.shape[2] else states[:, :, :count]


def softmax(scores: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Row-wise softmax in float32, cast back to the scores' dtype, as eager attention does; written
    into the flat float32 buffer `out` (`BlockBuffers.probs`) where one is given."""
    if out is None:
        return scores.softmax(-1, dtype=torch.float32).to(scores.dtype)
    return torch.softmax(scores, -1, dtype=torch.float32, out=_into(out, scores.shape)).to(scores.dtype)


def grouped_weighted_sum(probs: torch.Tensor, value: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """P·V from grouped probabilities [B, h_kv, g, T, n] and values [B, h_kv, n, d_h]: [B, h_q, T, d_h],
    written into the flat buffer `out` (`BlockBuffers.output`) where one is given."""
    batch, h_kv, group, q_len, n = probs.shape
    head_dim = value.shape[-1]
    output = torch.bmm(probs.reshape(batch * h_kv, group * q_len, n), value.reshape(batch * h_kv, n, head_dim),
                       out=_into(out, (batch * h_kv, group * q_len, head_dim)))
    return output.view(batch, h_kv * group, q_len, head_dim)


def merge_heads(output: torch.Tensor, merged: torch.Tensor | None, block: slice) -> torch.Tensor:
    """The heads' outputs [B, h_q, rows, d_h] as [B, rows, h_q, d_h] (eager's `transpose(1, 2).contiguous()`):
    written into rows `block` of `merged` [B, T, h_q, d_h] and `merged` returned; where `merged` is None
    (the step's one block), a tensor of their own."""
    if merged is None:
        return output.transpose(1, 2).contiguous()
    merged[:, block].copy_(output.transpose(1, 2))
    return merged


def in_head_order(probs: torch.Tensor) -> torch.Tensor:
    """Batch row 0 of grouped probabilities [B, h_kv, g, T, n] as [h_q, T, n] (a view)."""
    batch, h_kv, group, q_len, n = probs.shape
    return (probs if batch == 1 else probs[0]).view(h_kv * group, q_len, n)


def recompute_probs(inputs: AttentionInputs, keys: torch.Tensor, padding: torch.Tensor | None = None,
                    rows: tuple[int, int] | None = None, key_factor: int = 1) -> np.ndarray:
    """A step's attention probabilities from its queries and the cached keys, under a causal mask.

    The mask is eager's (0, or the dtype's minimum above the diagonal: `transformers.masking_utils`),
    and the blocks are the step's (`block_rows` of the same shape, the same blocks even for a few
    rows), so the probabilities are the ones the step computed, bit for bit. Only for keys every query
    could see when it ran (no sliding window cut them). Computed a block of query rows at a time
    (`block_rows`): the transient memory is a block's, beside the result. A block reads the keys the
    step's block read (`keys_read`): under the causal mask, not those after its last row, whose
    probabilities are exactly 0 (half the work of a long prefill's matrix).

    Args:
        inputs: the step's queries [h_q, T, d_h] (the last T of the n positions) and scaling.
        keys: [1, h_kv, n, d_h], the cache's keys of positions 0..n-1.
        padding: [n] attention mask of a sequence of a padded batch (0 at padding, masked as eager masks
            it), or None where the step had no padding (transformers then built no mask).
        rows: the query rows (first, last + 1) to compute; None: all T.
        key_factor: > 1: each row's mass on blocks of that many keys (`explorer.analysis.pooling.key_block_mass`),
            reduced block by block, so that a long prefill's [h_q, T, n] matrix is never held whole.

    Returns:
        [h_q, rows, n] float32, rows sum to 1; with `key_factor` > 1, [h_q, rows, ceil(n / key_factor)].
    """
    query = inputs.query[None]
    h_q, q_len, n = query.shape[1], query.shape[2], keys.shape[2]
    first_row, last_row = rows if rows is not None else (0, q_len)
    result = np.zeros((h_q, last_row - first_row, key_blocks(n, key_factor)), np.float32)
    block = block_rows(h_q, q_len, n, query.element_size())
    buffers = BlockBuffers.for_blocks(query, block, n) if block < q_len else NO_BUFFERS  # as the step had them
    with torch.inference_mode():
        starts = range(first_row - first_row % block, last_row, block) if first_row < last_row else ()  # the step's blocks
        for first in starts:
            last = min(first + block, q_len)
            mask = block_mask(None, first, last, q_len, n, query.dtype, query.device, buffers.mask)
            if padding is not None:  # a left-padded sequence's padded keys
                padded = (padding.to(query.device) == 0)[None, None, None, :n]
                mask = torch.zeros_like(padded, dtype=query.dtype) if mask is None else mask
                mask = mask.masked_fill(padded, torch.finfo(query.dtype).min)
            seen = keys_read(padding is None, last, q_len, n)  # the keys the step's block read
            scores = grouped_scores(query[:, :, first:last], first_keys(keys, seen), inputs.scaling, inputs.softcap,
                                    mask, buffers.scores)
            probs = in_head_order(softmax(scores, buffers.probs)).to(torch.float32).cpu().numpy()  # copied below
            wanted_first, wanted_last = max(first, first_row), min(last, last_row)
            part = probs[:, wanted_first - first:wanted_last - first]
            if key_factor > 1:
                part = key_block_mass(part, key_factor)
            result[:, wanted_first - first_row:wanted_last - first_row, :part.shape[2]] = part
    return result
