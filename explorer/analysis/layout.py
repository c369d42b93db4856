"""The weight matrices of a decoder layer, by canonical stop name.

One place says which linear maps a layer holds, so parameter counts, cost records and predicted
shapes agree. Source of the module structure: the `modeling_<family>.py` files of transformers 5.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.analysis.spec import ModelSpec


@dataclass(frozen=True)
class Linear:
    """One linear map y = x W (+ b), with W of shape [in_features, out_features].

    Attributes:
        name: stop name relative to the layer, e.g. "attn.q_proj", "mlp.experts.down_proj".
        in_features: k, the width of its input.
        out_features: m, the width of its output.
        bias: it adds a bias vector of length m.
        copies: how many such matrices the layer stores (E for an expert's matrix, else 1).
    """

    name: str
    in_features: int
    out_features: int
    bias: bool = False
    copies: int = 1

    @property
    def params(self) -> int:
        """Parameters of one copy: k*m, plus m for a bias."""
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


def attention_linears(spec: ModelSpec, merged: bool = False) -> list[Linear]:
    """Projections of one attention block: q, k, v (or merged qkv) and o.

    Args:
        spec: the model.
        merged: one `qkv_proj` of width (h_q + 2*h_kv)*d_h, as engines run it. Families that store
            it merged (Phi-3, GPT-2) are always merged.
    """
    d, q, kv = spec.hidden_size, spec.q_size, spec.kv_size
    if merged or spec.fused_qkv:
        projections = [Linear("attn.qkv_proj", d, q + 2 * kv, spec.qkv_bias)]
    else:
        projections = [Linear("attn.q_proj", d, q, spec.qkv_bias), Linear("attn.k_proj", d, kv, spec.qkv_bias),
                       Linear("attn.v_proj", d, kv, spec.qkv_bias)]
    return projections + [Linear("attn.o_proj", q, d, spec.o_bias)]


def mlp_linears(spec: ModelSpec, layer: int, merged: bool = False) -> list[Linear]:
    """Projections of one MLP: gate/up (or merged gate_up) and down; for MoE the router and experts.

    Args:
        spec: the model.
        layer: decoder layer index (MoE models may mix dense and MoE layers).
        merged: one `gate_up_proj` of width 2*d_ff, as engines run it (always for Phi-3).
    """
    d = spec.hidden_size
    if spec.moe_layers[layer]:
        width, experts, prefix = spec.intermediate_size, spec.n_experts, "mlp.experts."
        router = [Linear("mlp.router", d, experts)]
    else:
        width, experts, prefix, router = spec.dense_intermediate_size, 1, "mlp.", []
    bias = spec.mlp_bias
    if not spec.gated_mlp:
        inner = [Linear(prefix + "up_proj", d, width, bias, experts)]
    elif merged or spec.fused_gate_up:
        inner = [Linear(prefix + "gate_up_proj", d, 2 * width, bias, experts)]
    else:
        inner = [Linear(prefix + "gate_proj", d, width, bias, experts),
                 Linear(prefix + "up_proj", d, width, bias, experts)]
    return router + inner + [Linear(prefix + "down_proj", width, d, bias, experts)]
