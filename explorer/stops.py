"""Which stops one forward pass of a family has, in execution order, each named and of the kind its
row of the stop catalogue (`explorer.stop_catalogue.CATALOGUE`) gives.

The runner records a trace under these names and the analysis predicts shapes and costs under the
same names, so the two can be compared stop by stop. Which stops a layer has comes from its family
(`explorer.families`) and, in a mixture-of-experts model, from whether the layer routes: a MoE layer's
MLP is `mlp.router` then `mlp.experts` (`MOE_STOPS`). Names are built and parsed by
`explorer.stop_names`. Pure Python (no torch).
"""

from __future__ import annotations

from explorer.families import Family
from explorer.stop_catalogue import CATALOGUE
from explorer.stop_names import StopKind, stop_name

# A mixture-of-experts MLP: the router (logits [B*T, E], then softmax, top-k and the weights) and the
# experts (each routed expert's gate/up, activation and down on its tokens, then the weighted sum).
MOE_STOPS = ("mlp.router", "mlp.experts")


def _kinds(names: list[str] | tuple[str, ...]) -> list[tuple[str, StopKind]]:
    """(name, kind) of each stop, its kind from the catalogue."""
    return [(name, CATALOGUE[name].kind) for name in names]


def _attention_stops(family: Family) -> list[str]:
    if family.fused_qkv:
        projections = ["attn.qkv_proj"]
    elif family.qk_norm:
        projections = ["attn.q_proj", "attn.q_norm", "attn.k_proj", "attn.k_norm", "attn.v_proj"]
    else:
        projections = ["attn.q_proj", "attn.k_proj", "attn.v_proj"]
    rope = ["attn.rope"] if family.positions == "rope" else []  # GPT-2 adds positions at the embedding
    return projections + ["attn.split_heads", *rope, "attn.kv_cache_write", "attn.gqa_expand", "attn.scores",
                          "attn.softmax", "attn.weighted_sum", "attn.merge_heads", "attn.o_proj"]


def _mlp_stops(family: Family) -> list[str]:
    if not family.gated_mlp:
        projections = ["mlp.up_proj"]  # GPT-2's c_fc
    elif family.fused_gate_up:
        projections = ["mlp.gate_up_proj"]
    else:
        projections = ["mlp.gate_proj", "mlp.up_proj"]
    return projections + ["mlp.act", "mlp.down_proj"]


def layer_stops(family: Family, moe: bool = False) -> list[tuple[str, StopKind]]:
    """(name relative to the layer, kind) for one decoder layer of a traced family, in execution order;
    `moe`: a layer whose MLP is a mixture of experts (`MOE_STOPS`)."""
    stops = ["input_norm", *_attention_stops(family)]
    mlp = list(MOE_STOPS) if moe else _mlp_stops(family)
    if family.sandwich_norms:
        stops += ["post_attn_norm", "attn_residual", "pre_mlp_norm", *mlp, "post_mlp_norm", "mlp_residual"]
    else:
        stops += ["attn_residual", "post_attn_norm", *mlp, "mlp_residual"]
    return _kinds(stops)


def stop_table(family: Family, n_layers: int, stage: str,
               moe_layers: tuple[bool, ...] = ()) -> list[tuple[str, StopKind, int | None]]:
    """Every stop of a step, in execution order, as (canonical name, kind, layer index or None).

    Args:
        family: the model's family (`explorer.families.traced_family`).
        n_layers: number of decoder layers L.
        stage: "prefill" (starts with `tokenize`) or "decode" (the new token is already an id).
        moe_layers: per layer, whether its MLP is a mixture of experts (`ModelSpec.moe_layers`);
            () for a dense model.
    """
    top = (["tokenize"] if stage == "prefill" else []) + ["embed"]
    if family.positions == "learned":  # GPT-2: the position table's rows, added to the token embeddings
        top += ["pos_embed", "embed_add"]
    table: list[tuple[str, StopKind, int | None]] = [(name, kind, None) for name, kind in _kinds(top)]
    for layer in range(n_layers):
        moe = bool(moe_layers) and moe_layers[layer]
        table += [(stop_name(layer, name), kind, layer) for name, kind in layer_stops(family, moe)]
    return table + [(name, kind, None) for name, kind in _kinds(("final_norm", "lm_head", "sample", "detokenize"))]
