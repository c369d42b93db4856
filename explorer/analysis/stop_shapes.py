"""How each stop's shapes are predicted: one function per stop, named in its row of
`explorer.stop_catalogue`, from the model's `ModelSpec` and the step's B, T and n.

Shapes follow docs/concepts.md ("The stops of one forward pass") and record what the runner records:
projections [B, T, in] -> [B, T, out]; attention in heads layout [B, heads, T, d_h]; QK-norm on
[B, T, heads, d_h] in Qwen3 (before the transpose), on [B, heads, T, d_h] in Gemma 3; the LM head on
the last position only (or all T with `lm_head_all`). A mixture-of-experts layer works on the B*T
token rows: the router [B*T, d] -> logits [B*T, E], weights and expert ids [B*T, k]; the experts take
the rows, ids and weights and return [B*T, d]. Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from explorer.analysis.spec import ModelSpec

Shapes = tuple[list[list[int]], list[list[int]]]  # (input shapes, output shapes)


@dataclass(frozen=True)
class ShapeInputs:
    """What a stop's shapes depend on besides the model.

    Attributes:
        spec: the model.
        batch: B.
        tokens: T, positions entering the step (1 in decode).
        keys: n, key positions the layer's cache returns after the write (`shapes.cache_length`).
        lm_head_all: the LM head runs over all T positions; False: the last one.
    """

    spec: ModelSpec
    batch: int
    tokens: int
    keys: int
    lm_head_all: bool = False

    @property
    def row(self) -> list[int]:
        """[B, T, d]: the residual stream."""
        return [self.batch, self.tokens, self.spec.hidden_size]

    def width(self, features: int) -> list[int]:
        """[B, T, features]."""
        return [self.batch, self.tokens, features]

    def heads(self, n_heads: int, positions: int | None = None) -> list[int]:
        """[B, heads, positions (T by default), d_h]."""
        return [self.batch, n_heads, self.tokens if positions is None else positions, self.spec.head_dim]

    @property
    def scores(self) -> list[int]:
        """[B, h_q, T, n]: one score per query and key."""
        return [self.batch, self.spec.n_heads, self.tokens, self.keys]


ShapeRule = Callable[[ShapeInputs], Shapes]


def projection(out_features: Callable[[ModelSpec], int]) -> ShapeRule:
    """A GEMM over the residual stream: [B, T, d] -> [B, T, out_features(spec)]."""
    return lambda s: ([s.row], [s.width(out_features(s.spec))])


def on_residual(inputs: int) -> ShapeRule:
    """An operator that keeps the residual stream's shape: a norm (1 input) or a residual add (2)."""
    return lambda s: ([s.row] * inputs, [s.row])


def embed(s: ShapeInputs) -> Shapes:
    """Token ids [B, T] -> rows [B, T, d]."""
    return [[s.batch, s.tokens]], [s.row]


def pos_embed(s: ShapeInputs) -> Shapes:
    """GPT-2: position ids [1, T] -> rows [1, T, d], broadcast over B when added."""
    return [[1, s.tokens]], [[1, s.tokens, s.spec.hidden_size]]


def embed_add(s: ShapeInputs) -> Shapes:
    """[B, T, d] + [1, T, d] -> [B, T, d]."""
    return [s.row, [1, s.tokens, s.spec.hidden_size]], [s.row]


def lm_head(s: ShapeInputs) -> Shapes:
    """[B, R, d] -> [B, R, V], R = 1 (the last position) or T (`lm_head_all`)."""
    rows = s.tokens if s.lm_head_all else 1
    return [[s.batch, rows, s.spec.hidden_size]], [[s.batch, rows, s.spec.vocab_size]]


def qk_norm(query: bool) -> ShapeRule:
    """Per-head RMSNorm of the queries (or keys): Qwen3 normalises before the transpose to heads
    ([B, T, h, d_h], modeling_qwen3.py), Gemma 3 after it ([B, h, T, d_h], modeling_gemma3.py)."""
    def rule(s: ShapeInputs) -> Shapes:
        spec = s.spec
        heads = spec.n_heads if query else spec.n_kv_heads
        shape = s.heads(heads) if spec.arch.qk_norm_on_heads else [s.batch, s.tokens, heads, spec.head_dim]
        return [shape], [shape]
    return rule


def split_heads(s: ShapeInputs) -> Shapes:
    """Q [B, T, h_q*d_h], K and V [B, T, h_kv*d_h] (or the fused [B, T, (h_q+2h_kv)*d_h]) viewed as
    [B, h_q, T, d_h], [B, h_kv, T, d_h] x2."""
    spec = s.spec
    if spec.fused_qkv:
        inputs = [s.width(spec.q_size + 2 * spec.kv_size)]
    else:
        inputs = [s.width(spec.q_size), s.width(spec.kv_size), s.width(spec.kv_size)]
    kv = s.heads(spec.n_kv_heads)
    return inputs, [s.heads(spec.n_heads), kv, kv]


def rope(s: ShapeInputs) -> Shapes:
    """q [B, h_q, T, d_h] and k [B, h_kv, T, d_h], rotated in place."""
    shapes = [s.heads(s.spec.n_heads), s.heads(s.spec.n_kv_heads)]
    return shapes, shapes


def kv_cache_write(s: ShapeInputs) -> Shapes:
    """The step's K and V [B, h_kv, T, d_h] -> the cache's [B, h_kv, n, d_h] each."""
    new, cache = s.heads(s.spec.n_kv_heads), s.heads(s.spec.n_kv_heads, s.keys)
    return [new, new], [cache, cache]


def gqa_expand(s: ShapeInputs) -> Shapes:
    """K and V [B, h_kv, n, d_h] -> [B, h_q, n, d_h] each."""
    cache, expanded = s.heads(s.spec.n_kv_heads, s.keys), s.heads(s.spec.n_heads, s.keys)
    return [cache, cache], [expanded, expanded]


def scores(s: ShapeInputs) -> Shapes:
    """Q [B, h_q, T, d_h] and K [B, h_q, n, d_h] -> [B, h_q, T, n]."""
    return [s.heads(s.spec.n_heads), s.heads(s.spec.n_heads, s.keys)], [s.scores]


def softmax(s: ShapeInputs) -> Shapes:
    """[B, h_q, T, n] -> the same, rows summing to 1."""
    return [s.scores], [s.scores]


def weighted_sum(s: ShapeInputs) -> Shapes:
    """P [B, h_q, T, n] and V [B, h_q, n, d_h] -> [B, h_q, T, d_h]."""
    return [s.scores, s.heads(s.spec.n_heads, s.keys)], [s.heads(s.spec.n_heads)]


def merge_heads(s: ShapeInputs) -> Shapes:
    """[B, h_q, T, d_h] -> [B, T, h_q*d_h]."""
    return [s.heads(s.spec.n_heads)], [s.width(s.spec.q_size)]


def o_proj(s: ShapeInputs) -> Shapes:
    """[B, T, h_q*d_h] -> [B, T, d]."""
    return [s.width(s.spec.q_size)], [s.row]


def mlp_act(s: ShapeInputs) -> Shapes:
    """act(gate) * up: [B, T, d_ff] x2 -> [B, T, d_ff]; GPT-2's act(up): [B, T, d_ff] -> [B, T, d_ff]."""
    inner = s.width(s.spec.dense_intermediate_size)
    return [inner] * (2 if s.spec.gated_mlp else 1), [inner]


def down_proj(s: ShapeInputs) -> Shapes:
    """[B, T, d_ff] -> [B, T, d]."""
    return [s.width(s.spec.dense_intermediate_size)], [s.row]


def router(s: ShapeInputs) -> Shapes:
    """Token rows [B*T, d] -> logits [B*T, E], weights [B*T, k], expert ids [B*T, k]."""
    rows, k = s.batch * s.tokens, s.spec.experts_per_token
    return [[rows, s.spec.hidden_size]], [[rows, s.spec.n_experts], [rows, k], [rows, k]]


def experts(s: ShapeInputs) -> Shapes:
    """Rows [B*T, d], weights and expert ids [B*T, k] -> [B*T, d]."""
    rows, k = [s.batch * s.tokens, s.spec.hidden_size], [s.batch * s.tokens, s.spec.experts_per_token]
    return [rows, k, k], [rows]
