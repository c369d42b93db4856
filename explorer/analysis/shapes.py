"""Predicted shapes of every stop of a forward pass, named as `explorer.stops` names them.

Shapes follow docs/concepts.md ("The stops of one forward pass") and record what the runner
records: projections [B, T, in] -> [B, T, out]; attention in heads layout [B, heads, T, d_h];
QK-norm on [B, T, heads, d_h] in Qwen3 (before the transpose), on [B, heads, T, d_h] in Gemma 3;
the LM head on the last position only (or on all T with `lm_head_all`). A mixture-of-experts layer
works on the B*T token rows: the router [B*T, d] -> logits [B*T, E], weights and expert ids [B*T, k];
the experts take the rows, ids and weights and return [B*T, d]. How many rows each expert gets is the
routing's (measured) or, before any routing, the expected load B*T*k/E (`expert_load`).
"""

from __future__ import annotations

from explorer.analysis.spec import ModelSpec
from explorer.families import traced_family
from explorer.stops import parse_stop_name, stop_table

Shapes = tuple[list[list[int]], list[list[int]]]


def cache_length(spec: ModelSpec, layer: int, tokens: int, context: int) -> int:
    """Key positions the cache returns to attention after this step's write.

    Full attention: n. Sliding window w: min(n - T, w - 1) + T, as transformers'
    `DynamicSlidingWindowLayer.update` keeps w - 1 past positions and returns them with the new T.
    """
    window = spec.window(layer)
    return context if window is None else min(context - tokens, window - 1) + tokens


def predict_shapes(spec: ModelSpec, stage: str, batch: int, tokens: int, context: int,
                   lm_head_all: bool = False) -> dict[str, Shapes]:
    """(input shapes, output shapes) of every tensor stop from "embed" to "lm_head".

    Args:
        spec: the model.
        stage: "prefill" or "decode".
        batch: B.
        tokens: T (1 in decode).
        context: n, cache length after the step's write.
        lm_head_all: the LM head over all T positions ([B, T, V]); False: the last one ([B, 1, V]).

    Raises:
        ConfigError: the family is not traced, so has no stop table (`explorer.families.FAMILIES`).
    """
    b, t, d = batch, tokens, spec.hidden_size
    row = [b, t, d]
    shapes: dict[str, Shapes] = {"embed": ([[b, t]], [row])}
    if spec.arch.positions == "learned":  # GPT-2: position ids [1, T] -> rows [1, T, d], broadcast over B
        shapes["pos_embed"] = ([[1, t]], [[1, t, d]])
        shapes["embed_add"] = ([row, [1, t, d]], [row])
    for name, kind, layer in stop_table(traced_family(spec.family), spec.n_layers, stage, spec.moe_layers):
        if layer is not None:
            stop = parse_stop_name(name)[1]
            shapes[name] = _layer_stop(spec, stop, kind, b, t, cache_length(spec, layer, t, context))
    shapes["final_norm"] = ([row], [row])
    rows = t if lm_head_all else 1
    shapes["lm_head"] = ([[b, rows, d]], [[b, rows, spec.vocab_size]])
    return shapes


def _layer_stop(spec: ModelSpec, op: str, kind: str, b: int, t: int, n: int) -> Shapes:
    d, dh, hq, hkv = spec.hidden_size, spec.head_dim, spec.n_heads, spec.n_kv_heads
    row = [b, t, d]
    q_heads, kv_heads = [b, hq, t, dh], [b, hkv, t, dh]
    cache, expanded = [b, hkv, n, dh], [b, hq, n, dh]
    width = spec.dense_intermediate_size
    projections = {
        "attn.q_proj": [b, t, spec.q_size], "attn.k_proj": [b, t, spec.kv_size], "attn.v_proj": [b, t, spec.kv_size],
        "attn.qkv_proj": [b, t, spec.q_size + 2 * spec.kv_size],
        "mlp.gate_proj": [b, t, width], "mlp.up_proj": [b, t, width], "mlp.gate_up_proj": [b, t, 2 * width],
    }
    if op in projections:
        return [row], [projections[op]]
    q_norm, k_norm = _qk_norm_shapes(spec, b, t)
    fixed = {
        "attn.q_norm": ([q_norm], [q_norm]),
        "attn.k_norm": ([k_norm], [k_norm]),
        "attn.split_heads": (_split_inputs(spec, b, t), [q_heads, kv_heads, kv_heads]),
        "attn.rope": ([q_heads, kv_heads], [q_heads, kv_heads]),
        "attn.kv_cache_write": ([kv_heads, kv_heads], [cache, cache]),
        "attn.gqa_expand": ([cache, cache], [expanded, expanded]),
        "attn.scores": ([q_heads, expanded], [[b, hq, t, n]]),
        "attn.softmax": ([[b, hq, t, n]], [[b, hq, t, n]]),
        "attn.weighted_sum": ([[b, hq, t, n], expanded], [q_heads]),
        "attn.merge_heads": ([q_heads], [[b, t, spec.q_size]]),
        "attn.o_proj": ([[b, t, spec.q_size]], [row]),
        "mlp.act": ([[b, t, width]] * (2 if spec.gated_mlp else 1), [[b, t, width]]),
        "mlp.down_proj": ([[b, t, width]], [row]),
    }
    if op in fixed:
        return fixed[op]
    rows, k = [b * t, d], [b * t, spec.experts_per_token]
    if op == "mlp.router":
        return [rows], [[b * t, spec.n_experts], k, k]
    if op == "mlp.experts":
        return [rows, k, k], [rows]
    if kind == "norm":
        return [row], [row]
    return [row, row], [row]  # residual adds


def _split_inputs(spec: ModelSpec, b: int, t: int) -> list[list[int]]:
    if spec.fused_qkv:
        return [[b, t, spec.q_size + 2 * spec.kv_size]]
    return [[b, t, spec.q_size], [b, t, spec.kv_size], [b, t, spec.kv_size]]


def _qk_norm_shapes(spec: ModelSpec, b: int, t: int) -> tuple[list[int], list[int]]:
    """Shapes QK-norm acts on: Qwen3 normalises before the transpose to heads ([B, T, h, d_h],
    modeling_qwen3.py), Gemma 3 after it ([B, h, T, d_h], modeling_gemma3.py)."""
    hq, hkv, dh = spec.n_heads, spec.n_kv_heads, spec.head_dim
    if spec.arch.qk_norm_on_heads:
        return [b, hq, t, dh], [b, hkv, t, dh]
    return [b, t, hq, dh], [b, t, hkv, dh]


def expert_load(spec: ModelSpec, rows: int, tokens_per_expert: list[int] | None = None) -> list[float]:
    """[E] token rows each expert of a MoE layer processes: the executed routing's `tokens_per_expert`
    (`explorer.trace.RoutingRecord`), else the expected load under uniform routing, B*T*k/E each (a
    fraction where E does not divide it). Either way they sum to B*T*k.

    Args:
        spec: a mixture-of-experts model.
        rows: B*T, the token rows entering the layer.
        tokens_per_expert: the measured counts, or None.

    Raises:
        ValueError: the model has no experts.
    """
    if not spec.n_experts:
        raise ValueError(f"'{spec.family}' has no experts.")
    if tokens_per_expert is not None:
        return [float(count) for count in tokens_per_expert]
    return [rows * spec.experts_per_token / spec.n_experts] * spec.n_experts


def expert_shapes(spec: ModelSpec, tokens: float) -> list[tuple[str, list[float], list[float]]]:
    """The work of one expert given `tokens` rows, as transformers' eager experts run it
    (modeling_mixtral.py `MixtralExperts.forward`): (step, input shape, output shape) for the gate/up GEMM
    [tokens, d] -> [tokens, 2*d_ff], the activation -> [tokens, d_ff], the down GEMM -> [tokens, d], and
    the weighting of its rows before they are added into the layer's [B*T, d] output."""
    d, width = spec.hidden_size, spec.intermediate_size
    return [("gate_up_proj", [tokens, d], [tokens, 2 * width]), ("act", [tokens, 2 * width], [tokens, width]),
            ("down_proj", [tokens, width], [tokens, d]), ("weighted sum", [tokens, d], [tokens, d])]
