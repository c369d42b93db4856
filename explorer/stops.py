"""The canonical stops of one forward pass, built in one place.

The runner records a trace under these names and the analysis predicts shapes and costs under the
same names, so the two can be compared stop by stop. Pure Python (no torch).

Names: `tokenize`, `embed`, `layers.{i}.<stop>`, `final_norm`, `lm_head`, `sample`, `detokenize`.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.errors import ConfigError


@dataclass(frozen=True)
class ArchFeatures:
    """What a model family adds to or merges in the Llama block.

    Attributes:
        qk_norm: per-head RMSNorm on queries and keys after projection (Qwen3, Gemma 3).
        fused_qkv: one `qkv_proj` instead of q/k/v projections (Phi-3).
        fused_gate_up: one `gate_up_proj` instead of gate and up projections (Phi-3).
        sandwich_norms: norms before and after both attention and MLP, four per layer (Gemma 3).
    """

    qk_norm: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    sandwich_norms: bool = False


# HF `model_type` -> features; the runner supports exactly these families.
FAMILIES = {
    "llama": ArchFeatures(),
    "mistral": ArchFeatures(),
    "qwen2": ArchFeatures(),
    "qwen3": ArchFeatures(qk_norm=True),
    "gemma3_text": ArchFeatures(qk_norm=True, sandwich_norms=True),
    "phi3": ArchFeatures(fused_qkv=True, fused_gate_up=True),
}


def features_for(model_type: str) -> ArchFeatures:
    """The features of an HF `model_type`.

    Raises:
        ConfigError: the family is not one the runner traces.
    """
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise ConfigError(
            f"Model type '{model_type}' is not traced yet; supported: {', '.join(sorted(FAMILIES))}."
        ) from None


def _attention_stops(f: ArchFeatures) -> list[tuple[str, str]]:
    if f.fused_qkv:
        projections = [("attn.qkv_proj", "gemm")]
    elif f.qk_norm:
        projections = [
            ("attn.q_proj", "gemm"), ("attn.q_norm", "norm"),
            ("attn.k_proj", "gemm"), ("attn.k_norm", "norm"),
            ("attn.v_proj", "gemm"),
        ]
    else:
        projections = [("attn.q_proj", "gemm"), ("attn.k_proj", "gemm"), ("attn.v_proj", "gemm")]
    return projections + [
        ("attn.split_heads", "reshape"),
        ("attn.rope", "rope"),
        ("attn.kv_cache_write", "cache_write"),
        ("attn.gqa_expand", "broadcast"),
        ("attn.scores", "batched_gemm"),
        ("attn.softmax", "softmax"),
        ("attn.weighted_sum", "batched_gemm"),
        ("attn.merge_heads", "reshape"),
        ("attn.o_proj", "gemm"),
    ]


def _mlp_stops(f: ArchFeatures) -> list[tuple[str, str]]:
    if f.fused_gate_up:
        projections = [("mlp.gate_up_proj", "gemm")]
    else:
        projections = [("mlp.gate_proj", "gemm"), ("mlp.up_proj", "gemm")]
    return projections + [("mlp.act", "elementwise"), ("mlp.down_proj", "gemm")]


def layer_stops(features: ArchFeatures) -> list[tuple[str, str]]:
    """(name relative to the layer, kind) for one decoder layer, in execution order."""
    stops = [("input_norm", "norm")] + _attention_stops(features)
    if features.sandwich_norms:
        stops += [("post_attn_norm", "norm"), ("attn_residual", "elementwise"), ("pre_mlp_norm", "norm")]
        stops += _mlp_stops(features) + [("post_mlp_norm", "norm"), ("mlp_residual", "elementwise")]
    else:
        stops += [("attn_residual", "elementwise"), ("post_attn_norm", "norm")]
        stops += _mlp_stops(features) + [("mlp_residual", "elementwise")]
    return stops


def stop_table(features: ArchFeatures, n_layers: int, stage: str) -> list[tuple[str, str, int | None]]:
    """Every stop of a step, in execution order, as (canonical name, kind, layer index or None).

    Args:
        features: the model family's features.
        n_layers: number of decoder layers L.
        stage: "prefill" (starts with `tokenize`) or "decode" (the new token is already an id).
    """
    table: list[tuple[str, str, int | None]] = []
    if stage == "prefill":
        table.append(("tokenize", "tokenize", None))
    table.append(("embed", "gather", None))
    for layer in range(n_layers):
        table += [(f"layers.{layer}.{name}", kind, layer) for name, kind in layer_stops(features)]
    table += [
        ("final_norm", "norm", None),
        ("lm_head", "gemm", None),
        ("sample", "sample", None),
        ("detokenize", "detokenize", None),
    ]
    return table
