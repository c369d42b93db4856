"""How each stop is costed: one rule per stop, named in its row of `explorer.stop_catalogue`, giving
the stop's cost records for one layer (or outside the layers) of a step.

Formulas: `explorer.analysis.records` for GEMMs and elementwise operators (docs/concepts.md's
conventions), the functions below for the rest. Stops that move nothing have no rule: split/merge
heads are views, and the GQA expand is done by indexing (as fused attention kernels do, so the KV
cache is read once, by scores and weighted sum). Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable

from explorer.analysis.layout import Linear, attention_linears, mlp_linears
from explorer.analysis.records import CostOptions, OpCost, Step, elementwise_cost, linear_cost, norm_cost, summed
from explorer.analysis.spec import ModelSpec
from explorer.stop_names import stop_name

# FLOPs per element, counting exp and tanh as one FLOP each (a convention; they cost more cycles).
# softmax: max, subtract, exp, sum, divide (the count LLM-Viewer uses). rope: x*cos + rotate(x)*sin.
# silu(x) = x / (1 + exp(-x)): negate, exp, add, divide. gelu_tanh(x) = 0.5x(1 + tanh(c(x + a x^3))):
# x^3 (2), *a, +x, *c, tanh, +1, *x, *0.5. A gated MLP adds one multiply by `up`.
SOFTMAX_FLOPS_PER_ELEMENT = 5
ROPE_FLOPS_PER_ELEMENT = 3
ACTIVATION_FLOPS_PER_ELEMENT = {"silu": 4, "gelu_tanh": 9}
INT64_BYTES = 8

# (spec, layer or None outside the layers, step, options) -> the stop's records (none where it costs
# nothing in this configuration, e.g. k_proj when the projections are merged into one qkv_proj)
CostRule = Callable[[ModelSpec, int | None, Step, CostOptions], list[OpCost]]


def embed(spec: ModelSpec, layer: None, step: Step, options: CostOptions) -> list[OpCost]:
    """Gather B*T rows of the [V, d] table: reads B*T*d weights and B*T int64 ids, writes B*T*d.

    Gemma 3 multiplies by sqrt(d) (B*T*d FLOPs); no other arithmetic.
    """
    p, elements = options.precision, step.rows * spec.hidden_size
    return [OpCost(name="embed", kind="gather", layer=None, flops=elements if spec.embed_scale else 0,
                   weight_bytes=elements * p.weight_bytes,
                   act_in_bytes=step.rows * INT64_BYTES, act_out_bytes=elements * p.activation_bytes)]


def pos_embed(spec: ModelSpec, layer: None, step: Step, options: CostOptions) -> list[OpCost]:
    """GPT-2: gather T rows of the [n_positions, d] table (the position ids [1, T] are shared by the batch)."""
    p, d, t = options.precision, spec.hidden_size, step.tokens
    return [OpCost("pos_embed", "gather", None, 0, weight_bytes=t * d * p.weight_bytes, act_in_bytes=t * INT64_BYTES,
                   act_out_bytes=t * d * p.activation_bytes)]


def embed_add(spec: ModelSpec, layer: None, step: Step, options: CostOptions) -> list[OpCost]:
    """GPT-2: add the [1, T, d] position rows to the [B, T, d] token rows (B*T*d FLOPs; reads both, writes one)."""
    p, rows = options.precision, step.rows * spec.hidden_size
    return [OpCost("embed_add", "elementwise", None, rows, act_in_bytes=(rows + step.tokens * spec.hidden_size)
                   * p.activation_bytes, act_out_bytes=rows * p.activation_bytes)]


def lm_head(spec: ModelSpec, layer: None, step: Step, options: CostOptions) -> list[OpCost]:
    """[R, d] x [d, V] with R = B (last position only, as `generate` runs it: logits_to_keep=1) or B*T.

    FLOPs 2*R*d*V (docs/concepts.md; LLM-Viewer drops the factor 2 here).
    """
    rows = step.rows if options.lm_head_all_positions else step.batch
    return [linear_cost("lm_head", None, rows, spec.hidden_size, spec.vocab_size, options.precision)]


def norm(stop: str) -> CostRule:
    """RMSNorm or LayerNorm (the family's) of the B*T rows of the residual stream, over d."""
    return lambda spec, layer, step, options: [
        norm_cost(stop, layer, step.rows, spec.hidden_size, spec.norm, options.precision)]


def residual(stop: str) -> CostRule:
    """x + f(x): one add per element of [B, T, d]; reads two tensors, writes one."""
    return lambda spec, layer, step, options: [
        elementwise_cost(stop, "elementwise", layer, step.rows * spec.hidden_size, 1, options.precision, inputs=2)]


def _linear(linear: Linear, layer: int, rows: float, options: CostOptions, matrices_read: float = 1.0) -> OpCost:
    return linear_cost(linear.name, layer, rows, linear.in_features, linear.out_features, options.precision,
                       linear.bias, matrices_read)


def attention_projection(stop: str) -> CostRule:
    """A projection of attention (`explorer.analysis.layout.attention_linears`). With merged projections
    q_proj's place holds the one qkv_proj GEMM, and k_proj's and v_proj's hold none."""
    def rule(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
        merged = "attn.qkv_proj" if stop == "attn.q_proj" else stop
        return [_linear(linear, layer, step.rows, options)
                for linear in attention_linears(spec, options.merged_projections) if linear.name in (stop, merged)]
    return rule


def mlp_projection(stop: str) -> CostRule:
    """A projection of a dense MLP (`explorer.analysis.layout.mlp_linears`). With merged projections
    gate_proj's place holds the one gate_up_proj GEMM, and up_proj's holds none."""
    def rule(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
        merged = "mlp.gate_up_proj" if stop == "mlp.gate_proj" else stop
        return [_linear(linear, layer, step.rows, options)
                for linear in mlp_linears(spec, layer, options.merged_projections) if linear.name in (stop, merged)]
    return rule


def qk_norm(query: bool) -> CostRule:
    """RMSNorm over d_h of each query head (after q_proj) or key head (after k_proj)."""
    def rule(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
        heads, which = (spec.n_heads, "q") if query else (spec.n_kv_heads, "k")
        return [norm_cost(f"attn.{which}_norm", layer, step.rows * heads, spec.head_dim, "rmsnorm", options.precision)]
    return rule


def rope(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """Rotate q [B, T, h_q*d_h] and k [B, T, h_kv*d_h] (not v)."""
    return [elementwise_cost("attn.rope", "rope", layer, step.rows * (spec.q_size + spec.kv_size),
                             ROPE_FLOPS_PER_ELEMENT, options.precision)]


def kv_cache_write(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """Copy the step's new K and V, [B, h_kv, T, d_h] each, into the cache (converting to its format)."""
    elements = 2 * step.rows * spec.kv_size
    return [OpCost(name=stop_name(layer, "attn.kv_cache_write"), kind="cache_write", layer=layer, flops=0,
                   act_in_bytes=elements * options.precision.activation_bytes,
                   kv_write_bytes=elements * options.precision.kv_bytes)]


def attended_keys(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> int:
    """Key positions each query's scores cover, the full [T, keys] rectangle as eager attention and
    SDPA's math path compute it (a causal kernel that skips the masked half of a prefill does about
    half the score FLOPs).

    In a sliding-window layer a decode step's cache holds min(n, window) positions, but a prefill's
    eager attention still computes all T x T scores and masks those outside the window (what the
    trace records), so keys = n there; a fused kernel (`fused_attention`, FlashAttention's window)
    skips them: keys = min(n, window).
    """
    window = spec.window(layer)
    skips_outside = step.stage == "decode" or options.fused_attention  # the cache, or the kernel, keeps w
    return min(step.context, window) if window and skips_outside else step.context


def _score_matrix(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> tuple[int, float]:
    """(elements of the [B, h_q, T, keys] score matrix, its bytes in memory: none with `fused_attention`,
    where it stays on chip)."""
    matrix = step.batch * spec.n_heads * step.tokens * attended_keys(spec, layer, step, options)
    return matrix, 0.0 if options.fused_attention else matrix * options.precision.activation_bytes


def _batched_gemm(stop: str, spec: ModelSpec, layer: int, step: Step, options: CostOptions,
                  reads_matrix: bool) -> list[OpCost]:
    """Q K^T (reads Q rows, writes the matrix) or P V (reads the matrix, writes the output rows):
    2*B*h_q*T*keys*d_h FLOPs (decode: 4*B*h_q*d_h*n for the two, docs/concepts.md); each reads one of
    K, V once: B*h_kv*keys*d_h elements in the KV format."""
    p = options.precision
    matrix, matrix_bytes = _score_matrix(spec, layer, step, options)
    rows_bytes = step.batch * step.tokens * spec.q_size * p.activation_bytes
    cache_bytes = step.batch * attended_keys(spec, layer, step, options) * spec.kv_size * p.kv_bytes
    flops = 2.0 * matrix * spec.head_dim
    act_in, act_out = (matrix_bytes, rows_bytes) if reads_matrix else (rows_bytes, matrix_bytes)
    return [OpCost(stop_name(layer, stop), "batched_gemm", layer, flops, flops,
                   act_in_bytes=act_in, act_out_bytes=act_out, kv_read_bytes=cache_bytes)]


def scores(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """S = Q K^T / sqrt(d_h) over the attended keys (`attended_keys`)."""
    return _batched_gemm("attn.scores", spec, layer, step, options, reads_matrix=False)


def softmax(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """Row-wise softmax of the [B, h_q, T, keys] matrix, `SOFTMAX_FLOPS_PER_ELEMENT` each."""
    matrix, matrix_bytes = _score_matrix(spec, layer, step, options)
    return [OpCost(stop_name(layer, "attn.softmax"), "softmax", layer, SOFTMAX_FLOPS_PER_ELEMENT * matrix,
                   act_in_bytes=matrix_bytes, act_out_bytes=matrix_bytes)]


def weighted_sum(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """O = P V over the attended keys."""
    return _batched_gemm("attn.weighted_sum", spec, layer, step, options, reads_matrix=True)


def _activation_cost(spec: ModelSpec, name: str, layer: int, rows: float, width: int, options: CostOptions) -> OpCost:
    """act(gate) * up (gated) or act(up) over [rows, width]."""
    gated = spec.gated_mlp
    flops = ACTIVATION_FLOPS_PER_ELEMENT[spec.activation] + (1 if gated else 0)
    return elementwise_cost(name, "elementwise", layer, rows * width, flops, options.precision,
                            inputs=2 if gated else 1)


def mlp_act(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """A dense MLP's activation over [B*T, d_ff]."""
    return [_activation_cost(spec, "mlp.act", layer, step.rows, spec.dense_intermediate_size, options)]


def experts_touched(n_experts: int, experts_per_token: int, routed_tokens: int) -> float:
    """Expected distinct experts a step reads: E * (1 - (1 - k/E)^(B*T)).

    Derivation: with uniform routing an expert is missed by one token with probability 1 - k/E,
    by all B*T tokens (independently) with that to the power B*T. Batch-1 decode reads k experts;
    large batches read nearly all E.
    """
    return n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** routed_tokens)


def router(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """The [B*T, d] x [d, E] GEMM (its softmax and top-k over E per row are left out: E values a row
    against the GEMM's 2*d*E FLOPs)."""
    return [_linear(mlp_linears(spec, layer, options.merged_projections)[0], layer, step.rows, options)]


def experts(spec: ModelSpec, layer: int, step: Step, options: CostOptions) -> list[OpCost]:
    """Every routed expert's gate/up GEMMs, activation and down GEMM over B*T*k rows in all (each row
    goes to k distinct experts, so the rows are the same whatever the routing), then the weighted sum
    of each row's k outputs (a multiply and an add per element), as one record. Only the weights of
    the experts that received tokens are read: `step.experts_hit[layer]` where the routing was
    executed, else the uniform expectation `experts_touched`."""
    _, *inner, down = mlp_linears(spec, layer, options.merged_projections)
    hit = step.experts_hit[layer] if step.experts_hit else None
    read = float(hit) if hit is not None else experts_touched(spec.n_experts, spec.experts_per_token, step.rows)
    rows = step.rows * spec.experts_per_token
    parts = [_linear(linear, layer, rows, options, read) for linear in inner]
    parts += [_activation_cost(spec, "mlp.experts", layer, rows, down.in_features, options),
              _linear(down, layer, rows, options, read),
              elementwise_cost("mlp.experts", "experts", layer, rows * spec.hidden_size, 2, options.precision)]
    return [summed(stop_name(layer, "mlp.experts"), "experts", layer, parts)]
