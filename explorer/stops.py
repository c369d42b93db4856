"""The canonical stops of one forward pass and their names, built and parsed in one place.

The runner records a trace under these names and the analysis predicts shapes and costs under the
same names, so the two can be compared stop by stop. Pure Python (no torch).

Names: `tokenize`, `embed` (GPT-2: then `pos_embed` and `embed_add`), `layers.{i}.<stop>` (`stop_name`),
`final_norm`, `lm_head`, `sample`, `detokenize`. Which stops a layer has comes from its family
(`explorer.families`) and, in a mixture-of-experts model, from whether the layer routes: a MoE layer's
MLP is `mlp.router` then `mlp.experts` (`MOE_STOPS`).
"""

from __future__ import annotations

import functools

from explorer.families import Family

_LAYER_PREFIX = "layers."
# A mixture-of-experts MLP: the router (logits [B*T, E], then softmax, top-k and the weights) and the
# experts (each routed expert's gate/up, activation and down on its tokens, then the weighted sum).
MOE_STOPS = [("mlp.router", "gemm"), ("mlp.experts", "experts")]


def stop_name(layer: int | None, stop: str) -> str:
    """The canonical name: "layers.{layer}.{stop}" inside a layer ("layers.3.attn.q_proj"), `stop` outside."""
    return stop if layer is None else f"{_LAYER_PREFIX}{layer}.{stop}"


@functools.lru_cache(maxsize=8192)  # a step parses every stop's name: ~600 a step on the embedded model
def parse_stop_name(name: str) -> tuple[int | None, str]:
    """(layer index, layer-relative stop) of a canonical name; (None, name) outside the layers.

    "layers.3.attn.q_proj" -> (3, "attn.q_proj"); "lm_head" -> (None, "lm_head"); a name that is
    already layer-relative ("attn.q_proj", a sum over layers) -> (None, "attn.q_proj").
    """
    if not name.startswith(_LAYER_PREFIX):
        return None, name
    layer, stop = name[len(_LAYER_PREFIX):].split(".", 1)
    return int(layer), stop


def _attention_stops(family: Family) -> list[tuple[str, str]]:
    if family.fused_qkv:
        projections = [("attn.qkv_proj", "gemm")]
    elif family.qk_norm:
        projections = [
            ("attn.q_proj", "gemm"), ("attn.q_norm", "norm"),
            ("attn.k_proj", "gemm"), ("attn.k_norm", "norm"),
            ("attn.v_proj", "gemm"),
        ]
    else:
        projections = [("attn.q_proj", "gemm"), ("attn.k_proj", "gemm"), ("attn.v_proj", "gemm")]
    rope = [("attn.rope", "rope")] if family.positions == "rope" else []  # GPT-2 adds positions at the embedding
    return projections + [("attn.split_heads", "reshape"), *rope] + [
        ("attn.kv_cache_write", "cache_write"),
        ("attn.gqa_expand", "broadcast"),
        ("attn.scores", "batched_gemm"),
        ("attn.softmax", "softmax"),
        ("attn.weighted_sum", "batched_gemm"),
        ("attn.merge_heads", "reshape"),
        ("attn.o_proj", "gemm"),
    ]


def _mlp_stops(family: Family) -> list[tuple[str, str]]:
    if not family.gated_mlp:
        projections = [("mlp.up_proj", "gemm")]  # GPT-2's c_fc
    elif family.fused_gate_up:
        projections = [("mlp.gate_up_proj", "gemm")]
    else:
        projections = [("mlp.gate_proj", "gemm"), ("mlp.up_proj", "gemm")]
    return projections + [("mlp.act", "elementwise"), ("mlp.down_proj", "gemm")]


def layer_stops(family: Family, moe: bool = False) -> list[tuple[str, str]]:
    """(name relative to the layer, kind) for one decoder layer of a traced family, in execution order;
    `moe`: a layer whose MLP is a mixture of experts (`MOE_STOPS`)."""
    stops = [("input_norm", "norm")] + _attention_stops(family)
    mlp = MOE_STOPS if moe else _mlp_stops(family)
    if family.sandwich_norms:
        stops += [("post_attn_norm", "norm"), ("attn_residual", "elementwise"), ("pre_mlp_norm", "norm")]
        stops += mlp + [("post_mlp_norm", "norm"), ("mlp_residual", "elementwise")]
    else:
        stops += [("attn_residual", "elementwise"), ("post_attn_norm", "norm")]
        stops += mlp + [("mlp_residual", "elementwise")]
    return stops


def stop_table(family: Family, n_layers: int, stage: str,
               moe_layers: tuple[bool, ...] = ()) -> list[tuple[str, str, int | None]]:
    """Every stop of a step, in execution order, as (canonical name, kind, layer index or None).

    Args:
        family: the model's family (`explorer.families.traced_family`).
        n_layers: number of decoder layers L.
        stage: "prefill" (starts with `tokenize`) or "decode" (the new token is already an id).
        moe_layers: per layer, whether its MLP is a mixture of experts (`ModelSpec.moe_layers`);
            () for a dense model.
    """
    table: list[tuple[str, str, int | None]] = []
    if stage == "prefill":
        table.append(("tokenize", "tokenize", None))
    table.append(("embed", "gather", None))
    if family.positions == "learned":  # GPT-2: the position table's rows, added to the token embeddings
        table += [("pos_embed", "gather", None), ("embed_add", "elementwise", None)]
    for layer in range(n_layers):
        moe = bool(moe_layers) and moe_layers[layer]
        table += [(stop_name(layer, name), kind, layer) for name, kind in layer_stops(family, moe)]
    table += [
        ("final_norm", "norm", None),
        ("lm_head", "gemm", None),
        ("sample", "sample", None),
        ("detokenize", "detokenize", None),
    ]
    return table
