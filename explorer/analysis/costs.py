"""Per-operator cost records of a step (prefill of T tokens, or one decode step at context n).

`step_costs` returns one `OpCost` per stop in execution order, named as `explorer.stops` names
them; `totals_by_op` sums them over layers. Formulas: `explorer.analysis.records` for GEMMs and
elementwise operators, the functions below for the rest. Stops that move nothing are left out:
split/merge heads are views, and the GQA expand is done by indexing (as fused attention kernels do,
so the KV cache is read once, by scores and weighted sum).
"""

from __future__ import annotations

from explorer.analysis.layout import Linear, attention_linears, mlp_linears
from explorer.analysis.records import (
    CostOptions,
    OpCost,
    Step,
    elementwise_cost,
    linear_cost,
    norm_cost,
    summed,
)
from explorer.analysis.spec import ModelSpec
from explorer.stops import stop_name

# FLOPs per element, counting exp and tanh as one FLOP each (a convention; they cost more cycles).
# softmax: max, subtract, exp, sum, divide (the count LLM-Viewer uses). rope: x*cos + rotate(x)*sin.
# silu(x) = x / (1 + exp(-x)): negate, exp, add, divide. gelu_tanh(x) = 0.5x(1 + tanh(c(x + a x^3))):
# x^3 (2), *a, +x, *c, tanh, +1, *x, *0.5. A gated MLP adds one multiply by `up`.
SOFTMAX_FLOPS_PER_ELEMENT = 5
ROPE_FLOPS_PER_ELEMENT = 3
ACTIVATION_FLOPS_PER_ELEMENT = {"silu": 4, "gelu_tanh": 9}
INT64_BYTES = 8


def step_costs(spec: ModelSpec, step: Step, options: CostOptions | None = None) -> list[OpCost]:
    """Every operator's cost record for `step`, in execution order.

    Args:
        spec: the model.
        step: the stage, batch B, tokens T and context n.
        options: formats, merged projections, LM head over all positions, fused attention.

    Returns:
        "embed" (GPT-2: then "pos_embed" and "embed_add"), then "layers.{i}.<stop>" for each layer,
        then "final_norm" and "lm_head".
    """
    options = options or CostOptions()
    costs = [embed_cost(spec, step, options), *position_costs(spec, step, options)]
    for layer in range(spec.n_layers):
        costs += layer_costs(spec, layer, step, options)
    costs.append(norm_cost("final_norm", None, step.rows, spec.hidden_size, spec.norm, options.precision))
    costs.append(lm_head_cost(spec, step, options))
    return costs


def totals_by_op(costs: list[OpCost]) -> list[OpCost]:
    """The records summed over layers, one per layer-relative name, in first-seen order (layer None)."""
    groups: dict[str, list[OpCost]] = {}
    for cost in costs:
        groups.setdefault(cost.op, []).append(cost)
    return [summed(op, group[0].kind, None, group) for op, group in groups.items()]


def step_total(costs: list[OpCost]) -> OpCost:
    """One record summing every operator of the step, named "step"."""
    return summed("step", "step", None, costs)


def embed_cost(spec: ModelSpec, step: Step, options: CostOptions) -> OpCost:
    """Gather B*T rows of the [V, d] table: reads B*T*d weights and B*T int64 ids, writes B*T*d.

    Gemma 3 multiplies by sqrt(d) (B*T*d FLOPs); no other arithmetic. GPT-2's position rows and their
    sum are stops of their own (`position_costs`).
    """
    p, elements = options.precision, step.rows * spec.hidden_size
    return OpCost(
        name="embed", kind="gather", layer=None, flops=elements if spec.embed_scale else 0,
        weight_bytes=elements * p.weight_bytes,
        act_in_bytes=step.rows * INT64_BYTES, act_out_bytes=elements * p.activation_bytes,
    )


def position_costs(spec: ModelSpec, step: Step, options: CostOptions) -> list[OpCost]:
    """GPT-2's learned positions (none for RoPE families): "pos_embed" gathers T rows of the
    [n_positions, d] table (the position ids are [1, T], shared by the batch), "embed_add" adds them
    to the [B, T, d] token embeddings (B*T*d FLOPs; reads both, writes [B, T, d])."""
    if spec.arch.positions != "learned":
        return []
    p, d, t = options.precision, spec.hidden_size, step.tokens
    rows = step.rows * d
    return [
        OpCost("pos_embed", "gather", None, 0, weight_bytes=t * d * p.weight_bytes, act_in_bytes=t * INT64_BYTES,
               act_out_bytes=t * d * p.activation_bytes),
        OpCost("embed_add", "elementwise", None, rows, act_in_bytes=(rows + t * d) * p.activation_bytes,
               act_out_bytes=rows * p.activation_bytes),
    ]


def lm_head_cost(spec: ModelSpec, step: Step, options: CostOptions) -> OpCost:
    """[R, d] x [d, V] with R = B (last position only, as `generate` runs it: logits_to_keep=1) or B*T.

    FLOPs 2*R*d*V (docs/concepts.md; LLM-Viewer drops the factor 2 here).
    """
    rows = step.rows if options.lm_head_all_positions else step.batch
    return linear_cost("lm_head", None, rows, spec.hidden_size, spec.vocab_size, options.precision)


def layer_costs(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """Cost records of decoder layer `layer`, in execution order (Gemma 3: norms around both blocks)."""
    p, d = options.precision, spec.hidden_size

    def norm(name: str) -> OpCost:
        return norm_cost(name, layer, step.rows, d, spec.norm, p)

    residual_attn = residual_cost("attn_residual", layer, step, spec, options)
    residual_mlp = residual_cost("mlp_residual", layer, step, spec, options)
    attention = attention_costs(spec, layer, step, options)
    mlp = mlp_costs(spec, layer, step, options)
    if spec.arch.sandwich_norms:
        return ([norm("input_norm")] + attention + [norm("post_attn_norm"), residual_attn, norm("pre_mlp_norm")]
                + mlp + [norm("post_mlp_norm"), residual_mlp])
    return [norm("input_norm")] + attention + [residual_attn, norm("post_attn_norm")] + mlp + [residual_mlp]


def residual_cost(name: str, layer: int, step: Step, spec: ModelSpec, options: CostOptions) -> OpCost:
    """x + f(x): one add per element of [B, T, d]; reads two tensors, writes one."""
    return elementwise_cost(name, "elementwise", layer, step.rows * spec.hidden_size, 1, options.precision, inputs=2)


def _linear(linear: Linear, layer: int, rows: int, options: CostOptions, matrices_read: float = 1.0) -> OpCost:
    return linear_cost(linear.name, layer, rows, linear.in_features, linear.out_features, options.precision,
                       linear.bias, matrices_read)


def attention_costs(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """Projections, QK-norm, RoPE, cache write, scores, softmax, weighted sum and o_proj of one layer.

    Each query attends to n_keys keys, the full [T, n_keys] rectangle, as eager attention and SDPA's
    math path compute it (a causal kernel that skips the masked half of a prefill does about half
    the score FLOPs). In a sliding-window layer a decode step's cache holds min(n, window)
    positions, but a prefill's eager attention still computes all T x T scores and masks those
    outside the window (what the trace records), so n_keys = n there; a fused kernel
    (`fused_attention`, FlashAttention's window) skips them: n_keys = min(n, window).
    """
    p, b, t = options.precision, step.batch, step.tokens
    window = spec.window(layer)
    skips_outside = step.stage == "decode" or options.fused_attention  # the cache, or the kernel, keeps w
    keys = min(step.context, window) if window and skips_outside else step.context
    linears = attention_linears(spec, options.merged_projections)
    costs = []
    for linear in linears[:-1]:
        costs.append(_linear(linear, layer, step.rows, options))
        if spec.qk_norm and linear.name in ("attn.q_proj", "attn.k_proj", "attn.qkv_proj"):
            costs += _qk_norm_costs(spec, layer, step, options, linear.name)
    if spec.arch.positions == "rope":  # learned positions (GPT-2) are added at the embedding instead
        costs.append(elementwise_cost("attn.rope", "rope", layer, step.rows * (spec.q_size + spec.kv_size),
                                      ROPE_FLOPS_PER_ELEMENT, p))
    return costs + [
        kv_write_cost(spec, layer, step, options),
        *score_costs(spec, layer, b, t, keys, options),
        _linear(linears[-1], layer, step.rows, options),
    ]


def _qk_norm_costs(spec: ModelSpec, layer: int, step: Step, options: CostOptions, after: str) -> list[OpCost]:
    """RMSNorm over d_h of each query head (after q_proj) and each key head (after k_proj)."""
    heads = {"q": spec.n_heads, "k": spec.n_kv_heads}
    which = "qk" if after == "attn.qkv_proj" else after[len("attn.")]
    return [norm_cost(f"attn.{x}_norm", layer, step.rows * heads[x], spec.head_dim, "rmsnorm", options.precision)
            for x in which]


def kv_write_cost(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> OpCost:
    """Copy the step's new K and V, [B, h_kv, T, d_h] each, into the cache (converting to its format)."""
    elements = 2 * step.rows * spec.kv_size
    return OpCost(name=stop_name(layer, "attn.kv_cache_write"), kind="cache_write", layer=layer, flops=0,
                  act_in_bytes=elements * options.precision.activation_bytes,
                  kv_write_bytes=elements * options.precision.kv_bytes)


def score_costs(spec: ModelSpec, layer: int, batch: int, tokens: int, keys: int,
                options: CostOptions) -> list[OpCost]:
    """Scores Q K^T, softmax, and weighted sum P V over `keys` cached positions.

    Scores and weighted sum: 2*B*h_q*T*keys*d_h FLOPs each (decode: 4*B*h_q*d_h*n together,
    docs/concepts.md); each reads one of K, V once: B*h_kv*keys*d_h elements in the KV format. With
    `fused_attention` the [B, h_q, T, keys] matrix stays on chip: no bytes for it.
    """
    p = options.precision
    a, kv = p.activation_bytes, p.kv_bytes
    matrix = batch * spec.n_heads * tokens * keys
    matrix_bytes = 0.0 if options.fused_attention else matrix * a
    qkv_rows_bytes = batch * tokens * spec.q_size * a
    cache_bytes = batch * keys * spec.kv_size * kv
    bgemm = 2.0 * matrix * spec.head_dim
    return [
        OpCost(stop_name(layer, "attn.scores"), "batched_gemm", layer, bgemm, bgemm,
               act_in_bytes=qkv_rows_bytes, act_out_bytes=matrix_bytes, kv_read_bytes=cache_bytes),
        OpCost(stop_name(layer, "attn.softmax"), "softmax", layer, SOFTMAX_FLOPS_PER_ELEMENT * matrix,
               act_in_bytes=matrix_bytes, act_out_bytes=matrix_bytes),
        OpCost(stop_name(layer, "attn.weighted_sum"), "batched_gemm", layer, bgemm, bgemm,
               act_in_bytes=matrix_bytes, act_out_bytes=qkv_rows_bytes, kv_read_bytes=cache_bytes),
    ]


def experts_touched(n_experts: int, experts_per_token: int, routed_tokens: int) -> float:
    """Expected distinct experts a step reads: E * (1 - (1 - k/E)^(B*T)).

    Derivation: with uniform routing an expert is missed by one token with probability 1 - k/E,
    by all B*T tokens (independently) with that to the power B*T. Batch-1 decode reads k experts;
    large batches read nearly all E.
    """
    return n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** routed_tokens)


def mlp_costs(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """Gate/up (or merged gate_up, or GPT-2's up), activation and down; for MoE the router and the experts
    (`moe_costs`)."""
    linears = mlp_linears(spec, layer, options.merged_projections)
    if spec.moe_layers[layer]:
        return moe_costs(spec, layer, step, options, linears)
    *inner, down = linears
    costs = [_linear(linear, layer, step.rows, options) for linear in inner]
    return costs + [_activation_cost(spec, "mlp.act", layer, step.rows, down.in_features, options),
                    _linear(down, layer, step.rows, options)]


def moe_costs(spec: ModelSpec, layer: int, step: Step, options: CostOptions, linears: list[Linear]) -> list[OpCost]:
    """A mixture-of-experts MLP as two stops: "mlp.router" and "mlp.experts".

    The router is the [B*T, d] x [d, E] GEMM (its softmax and top-k over E per row are left out: E
    values a row against the GEMM's 2*d*E FLOPs). "mlp.experts" sums every routed expert's gate/up
    GEMMs, activation and down GEMM over B*T*k rows in all (each row goes to k distinct experts, so
    the rows are the same whatever the routing), then the weighted sum of each row's k outputs (a
    multiply and an add per element). Only the weights of the experts that received tokens are read:
    `step.experts_hit[layer]` where the routing was executed, else the uniform expectation
    `experts_touched`.
    """
    router, *inner, down = linears
    hit = step.experts_hit[layer] if step.experts_hit else None
    read = float(hit) if hit is not None else experts_touched(spec.n_experts, spec.experts_per_token, step.rows)
    rows = step.rows * spec.experts_per_token
    parts = [_linear(linear, layer, rows, options, read) for linear in inner]
    parts += [_activation_cost(spec, "mlp.experts", layer, rows, down.in_features, options),
              _linear(down, layer, rows, options, read),
              elementwise_cost("mlp.experts", "experts", layer, rows * spec.hidden_size, 2, options.precision)]
    return [_linear(router, layer, step.rows, options), summed(stop_name(layer, "mlp.experts"), "experts", layer, parts)]


def _activation_cost(spec: ModelSpec, name: str, layer: int, rows: float, width: int, options: CostOptions) -> OpCost:
    """act(gate) * up (gated) or act(up) over [rows, width]."""
    gated = spec.gated_mlp
    flops = ACTIVATION_FLOPS_PER_ELEMENT[spec.activation] + (1 if gated else 0)
    return elementwise_cost(name, "elementwise", layer, rows * width, flops, options.precision,
                            inputs=2 if gated else 1)
