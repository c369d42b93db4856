"""Memory a prompt of T tokens needs in the explorer's hooked prefill, estimated before running it.

Pure arithmetic on a `ModelSpec` (no torch): the session (`explorer.runner.session`) compares it with
the device's free memory and refuses a prompt that would not fit before allocating anything;
`python -m explorer info --prompt-tokens T` prints it. Every term is an estimate from the dimensions;
benchmarks/bench_memory.py prints it beside the measured peak on the embedded model.

Terms (dtype bytes `b`: 4 for float32, 2 for bfloat16):
- weights: every parameter (`explorer.analysis.params`) x b.
- KV cache: 2 x h_kv x d_h x b per position and layer, over T + 1 positions (the prefill and the
  first decode step), a sliding-window layer capped at its window (`explorer.analysis.kv_cache`).
- kept queries: the post-RoPE queries the session keeps to recompute attention, h_q x d_h x b per
  token and layer (146 MB at 2,048 tokens on the embedded model in float32).
- kept matrices: the prefill's float32 [h_q, T, T] probabilities the session keeps beside the queries
  within its attention budget, layer by layer, as `explorer.runner.attention_store` decides.
- attention transient: one layer at a time, one query block's scores, probabilities and additive
  mask (`block_rows`), plus SDPA's boolean mask [T, T] (1 byte each) where a sliding window shorter than
  the prompt makes transformers build one for the pass (a plain causal prompt has none).
- activations: one layer at a time, at the MLP, which holds the most: the residual stream, the normed
  input and the output (3 x d) and the gate, up and their product (3 x d_ff), x b per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from explorer.analysis.kv_cache import kv_cache_size
from explorer.analysis.params import param_counts
from explorer.analysis.spec import ModelSpec

# Transient memory of one attention block (`block_rows`). Eager attention materialises the scores and
# probabilities of every query row at once: 9 heads x 2,048 x 2,048 x 4 B = 151 MB each on the embedded
# model at 2,048 tokens, 2.4 GB at 8,192; in blocks a layer's transient stays near this bound. The
# blocks write into buffers made once a layer (`explorer.runner.gqa.BlockBuffers`), so their size
# costs no page faults per block; larger blocks re-read the cached keys and values fewer times: one
# 8,192-token layer of the embedded model took 4.0 s in 3 MiB blocks (2 rows), 2.1 s in 16 MiB and
# 1.7 s in 32 MiB (28 rows); a 2,048-token layer 0.11-0.13 s from 4 to 64 MiB (two threads, one session).
ATTENTION_BLOCK_BYTES = 32 * 2**20

# Attention memory a session keeps, all steps together: the post-RoPE queries of every step and layer
# (always kept; a matrix is recomputed from them and the cached keys, a 2,048-token prefill layer in
# about 0.3 s), plus as many float32 probability matrices as fit beside them, the newest first. A short
# prompt keeps every matrix; a 2,048-token prompt with 64 decode steps keeps 146 MB of queries, a few
# MB of matrices and, with its 97 MB KV cache and at most 32 MB of pooled views
# (`explorer.runner.attention_store.POOLED_BYTES`), stays within the app's 300 MB per-session budget.
DEFAULT_ATTENTION_BUDGET_BYTES = 144 * 2**20

_KV_DTYPES = {4: "fp32", 2: "bf16", 1: "fp8"}


def block_rows(h_q: int, q_len: int, n: int, itemsize: int, budget_bytes: int = ATTENTION_BLOCK_BYTES) -> int:
    """Query rows per attention block, so that a block's transient tensors fit in `budget_bytes`.

    A row costs h_q x n elements in each of: the scores and the probabilities (the model's dtype,
    `itemsize` bytes), the float32 softmax, and the float32 copy a kept matrix takes; so
    h_q x n x (2 x itemsize + 8) bytes. At least 1 row, at most the T rows there are.
    """
    per_row = h_q * n * (2 * itemsize + 8)
    return max(1, min(q_len, budget_bytes // per_row))


@dataclass(frozen=True)
class PromptMemory:
    """The estimated memory of a hooked prefill of `prompt_tokens` tokens, in bytes (see the module).

    Attributes:
        prompt_tokens: T.
        weight_bytes: the parameters (already in memory once the model is loaded).
        kv_cache_bytes: the KV cache after the prefill and the first decode step.
        query_bytes: the post-RoPE queries the session keeps, every layer.
        kept_matrix_bytes: the prefill's probability matrices kept beside them.
        attention_transient_bytes: one layer's mask and query block, freed after the layer.
        activation_bytes: one layer's largest activations, freed after the layer.
    """

    prompt_tokens: int
    weight_bytes: int
    kv_cache_bytes: int
    query_bytes: int
    kept_matrix_bytes: int
    attention_transient_bytes: int
    activation_bytes: int

    @property
    def run_bytes(self) -> int:
        """What running the prompt adds to a loaded model: everything but the weights."""
        return (self.kv_cache_bytes + self.query_bytes + self.kept_matrix_bytes + self.attention_transient_bytes
                + self.activation_bytes)

    @property
    def kept_bytes(self) -> int:
        """What the session holds once the prefill is done (the per-layer terms are freed): the KV cache,
        the queries and the kept matrices. It grows by the cache's and queries' bytes per token with each
        decode step; the session's other holdings are capped (pooled views and lens residuals)."""
        return self.kv_cache_bytes + self.query_bytes + self.kept_matrix_bytes

    @property
    def total_bytes(self) -> int:
        """Weights plus `run_bytes`."""
        return self.weight_bytes + self.run_bytes

    def summary(self) -> str:
        """One line: the total and each term in MB (estimated)."""
        mb = 1e6
        return (f"about {self.total_bytes / mb:,.0f} MB estimated for {self.prompt_tokens:,} tokens: weights "
                f"{self.weight_bytes / mb:,.0f} MB, KV cache {self.kv_cache_bytes / mb:,.0f} MB, kept queries "
                f"{self.query_bytes / mb:,.0f} MB and attention matrices {self.kept_matrix_bytes / mb:,.0f} MB, "
                f"per layer {self.attention_transient_bytes / mb:,.0f} MB of attention mask and block and "
                f"{self.activation_bytes / mb:,.0f} MB of activations; the session then keeps "
                f"{self.kept_bytes / mb:,.0f} MB")


def prompt_memory(spec: ModelSpec, prompt_tokens: int, itemsize: int, attention_budget_bytes: int) -> PromptMemory:
    """Estimate a hooked prefill of `prompt_tokens` tokens (see the module for each term).

    Args:
        spec: the model.
        prompt_tokens: T >= 1.
        itemsize: bytes of one element of the weights, activations and KV cache (4 float32, 2 bfloat16).
        attention_budget_bytes: the session's attention memory, queries and kept matrices together.

    Raises:
        ValueError: T < 1, or an itemsize other than 1, 2 or 4.
    """
    if prompt_tokens < 1 or itemsize not in _KV_DTYPES:
        raise ValueError(f"need T >= 1 ({prompt_tokens}) and an itemsize of 1, 2 or 4 ({itemsize}).")
    t, h_q = prompt_tokens, spec.n_heads
    matrix_bytes = h_q * t * t * 4
    used, kept = query_bytes(spec, t, itemsize), 0
    for _ in range(spec.n_layers):  # the keeper's order: every query first, then each layer's matrix that fits
        if used + matrix_bytes <= attention_budget_bytes:
            used += matrix_bytes
            kept += matrix_bytes
    rows = block_rows(h_q, t, t, itemsize)
    return PromptMemory(
        prompt_tokens=t,
        weight_bytes=param_counts(spec).total * itemsize,
        kv_cache_bytes=kv_cache_size(spec, t + 1, kv_dtype=_KV_DTYPES[itemsize]).total_bytes,
        query_bytes=query_bytes(spec, t, itemsize),
        kept_matrix_bytes=kept,
        attention_transient_bytes=_boolean_mask_bytes(spec, t) + rows * t * (h_q * (2 * itemsize + 8) + itemsize),
        activation_bytes=(3 * spec.hidden_size + 3 * spec.intermediate_size) * t * itemsize,
    )


def query_bytes(spec: ModelSpec, q_len: int, itemsize: int) -> int:
    """The post-RoPE queries a step of `q_len` tokens keeps: [h_q, q_len, head_dim] a layer, every layer."""
    return spec.n_layers * spec.n_heads * q_len * spec.head_dim * itemsize


def _boolean_mask_bytes(spec: ModelSpec, t: int) -> int:
    """SDPA's [T, T] boolean mask, where a layer's sliding window does not cover the prompt (else
    transformers skips it: plain causal)."""
    return t * t if any(window is not None and window <= t for window in spec.layer_windows) else 0


def longest_prompt(spec: ModelSpec, itemsize: int, attention_budget_bytes: int, free_bytes: int, limit: int) -> int:
    """The most tokens, up to `limit`, whose `run_bytes` fit in `free_bytes` (0 if not even one does)."""
    low, high = 0, limit
    while low < high:  # run_bytes grows with T
        mid = math.ceil((low + high) / 2)
        if prompt_memory(spec, mid, itemsize, attention_budget_bytes).run_bytes <= free_bytes:
            low = mid
        else:
            high = mid - 1
    return low
