"""The cost record of one operator in one step, and the builders every operator's cost uses.

Conventions (docs/concepts.md, "Cost conventions of the roofline"): one FLOP is one multiply or
one add; a GEMM [R, k] x [k, m] is 2*R*k*m FLOPs; each operator reads its inputs from memory and writes
its outputs to memory once (no cache reuse between operators, no fusion unless asked for). Bytes are
split by source as LLM-Viewer does (Yuan et al. 2024, "LLM Inference Unveiled", arXiv:2402.16363).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from explorer.analysis.precision import Precision
from explorer.stop_names import parse_stop_name, stop_name

STAGES = ("prefill", "decode")


@dataclass(frozen=True)
class Step:
    """One forward pass: the prefill of T tokens, or one decode step.

    Attributes:
        stage: "prefill" or "decode".
        batch: B, sequences run together.
        tokens: T, tokens entering per sequence (1 in decode).
        context: n, positions in each sequence's KV cache after this step's write (>= T).
        experts_hit: per decoder layer, how many experts the executed routing sent tokens to (measured:
            `explorer.trace.RoutingRecord.experts_hit`), None for a dense layer; () where no routing
            was executed (shape-only, a what-if with another B or T): the cost model then expects
            uniform routing (`explorer.analysis.costs.experts_touched`).
    """

    stage: str
    batch: int
    tokens: int
    context: int
    experts_hit: tuple[int | None, ...] = ()

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"stage must be 'prefill' or 'decode', not '{self.stage}'.")
        if min(self.batch, self.tokens) < 1 or self.context < self.tokens:
            raise ValueError(f"need batch >= 1, tokens >= 1 and context >= tokens; got {self}.")
        if self.stage == "decode" and self.tokens != 1:
            raise ValueError("a decode step takes exactly one token per sequence.")

    @classmethod
    def prefill(cls, tokens: int, batch: int = 1) -> Step:
        """The prefill of `tokens` prompt tokens into an empty cache (n = T)."""
        return cls("prefill", batch, tokens, tokens)

    @classmethod
    def decode(cls, context: int, batch: int = 1) -> Step:
        """One decode step whose cache holds `context` positions after its write (n includes the new token)."""
        return cls("decode", batch, 1, context)

    @property
    def rows(self) -> int:
        """B*T: token rows every position-wise operator processes."""
        return self.batch * self.tokens


@dataclass(frozen=True)
class CostOptions:
    """How the step is run.

    Attributes:
        precision: formats of weights, activations and the KV cache.
        merged_projections: q/k/v as one `qkv_proj` and gate/up as one `gate_up_proj`, as inference
            engines (vLLM, TensorRT-LLM) run them: the input is read once instead of three/two times.
        lm_head_all_positions: the LM head over all T positions (prompt log-probs) instead of the last.
        fused_attention: scores, softmax and weighted sum in one kernel (FlashAttention, Dao et al.
            2022): the [B, h_q, T, n] score matrix never goes to memory. Same FLOPs.
    """

    precision: Precision = field(default_factory=Precision)
    merged_projections: bool = False
    lm_head_all_positions: bool = False
    fused_attention: bool = False


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes of one operator in one step.

    Attributes:
        name: canonical stop name (`explorer.stops`), e.g. "embed", "layers.3.attn.q_proj", or the
            layer-relative name ("attn.q_proj") for a sum over layers.
        kind: gather, norm, gemm, rope, cache_write, batched_gemm, softmax, elementwise.
        layer: decoder layer index; None outside the layers and for sums over layers.
        flops: every FLOP of the operator.
        matmul_flops: the part done in matrix multiplications (what `FlopCounterMode` counts).
        weight_bytes: weights (and norm weights, biases) read.
        act_in_bytes: activations read.
        act_out_bytes: activations written.
        kv_read_bytes: KV cache read.
        kv_write_bytes: KV cache written.
    """

    name: str
    kind: str
    layer: int | None
    flops: float
    matmul_flops: float = 0.0
    weight_bytes: float = 0.0
    act_in_bytes: float = 0.0
    act_out_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0

    @property
    def bytes(self) -> float:
        """All bytes moved: weights + activations in and out + KV read and written."""
        return (self.weight_bytes + self.act_in_bytes + self.act_out_bytes
                + self.kv_read_bytes + self.kv_write_bytes)

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (FLOP/byte); 0 for an operator that moves nothing."""
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def op(self) -> str:
        """The name relative to its layer ("attn.q_proj" for "layers.3.attn.q_proj")."""
        return parse_stop_name(self.name)[1]


_ADDITIVE = ("flops", "matmul_flops", "weight_bytes", "act_in_bytes", "act_out_bytes",
             "kv_read_bytes", "kv_write_bytes")  # OpCost's fields after name, kind and layer, in order


def summed(name: str, kind: str, layer: int | None, costs: Sequence[OpCost]) -> OpCost:
    """One record named `name` whose FLOPs and bytes are the sums of `costs`' (float, added in order
    from 0.0). A plain sum per field: a step's costs are summed per operator for every scenario of a
    roofline sweep, and building a record per addition cost most of that figure's time."""
    return OpCost(name, kind, layer, *(sum([getattr(cost, key) for cost in costs], 0.0) for key in _ADDITIVE))


def linear_cost(name: str, layer: int | None, rows: int, in_features: int, out_features: int,
                precision: Precision, bias: bool = False, matrices_read: float = 1.0) -> OpCost:
    """y = x W (+ b) over `rows` token rows, x: [rows, k], W: [k, m].

    FLOPs: 2*rows*k*m in the GEMM, + rows*m for the bias. Bytes: matrices_read * k*m weights (+ m
    bias at the activation format), rows*k activations in, rows*m activations out
    (docs/concepts.md, GEMM convention).

    Args:
        matrices_read: distinct weight matrices read (> 1 for MoE experts), 1 otherwise.
    """
    a, w = precision.activation_bytes, precision.weight_bytes
    matmul = 2.0 * rows * in_features * out_features
    bias_elements = out_features if bias else 0
    return OpCost(
        name=stop_name(layer, name), kind="gemm", layer=layer,
        flops=matmul + rows * bias_elements, matmul_flops=matmul,
        weight_bytes=matrices_read * (in_features * out_features * w + bias_elements * a),
        act_in_bytes=rows * in_features * a, act_out_bytes=rows * out_features * a,
    )


def elementwise_cost(name: str, kind: str, layer: int | None, elements: float, flops_per_element: float,
                     precision: Precision, inputs: int = 1, weight_elements: float = 0) -> OpCost:
    """An operator that reads `inputs` tensors of `elements` each and writes one of `elements`.

    FLOPs: flops_per_element * elements. Bytes: inputs*elements in, elements out, and
    `weight_elements` (norm weights) at the activation format.
    """
    a = precision.activation_bytes
    return OpCost(
        name=stop_name(layer, name), kind=kind, layer=layer, flops=flops_per_element * elements,
        weight_bytes=weight_elements * a, act_in_bytes=inputs * elements * a, act_out_bytes=elements * a,
    )


# Per element: square, add to the sum, multiply by 1/rms, multiply by the weight (the per-row sqrt
# and division are negligible). LayerNorm: sum for the mean, subtract, square, sum, multiply by
# 1/std, multiply by the weight, add the bias. Derived from the definitions (Zhang & Sennrich 2019;
# Ba et al. 2016).
NORM_FLOPS_PER_ELEMENT = {"rmsnorm": 4, "layernorm": 7}


def norm_cost(name: str, layer: int | None, rows: int, width: int, norm: str, precision: Precision) -> OpCost:
    """RMSNorm or LayerNorm of `rows` vectors of `width` features (weights of `width`, + bias for LayerNorm)."""
    weights = width * (2 if norm == "layernorm" else 1)
    return elementwise_cost(name, "norm", layer, rows * width, NORM_FLOPS_PER_ELEMENT[norm], precision,
                            weight_elements=weights)
