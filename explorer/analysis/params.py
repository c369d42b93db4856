"""Parameter counts: total, non-embedding, and active per token (MoE).

Counted from the module structure of transformers 5 (`explorer.analysis.layout`); they equal the
`sum(p.numel() for p in model.parameters())` that transformers reports, a tied LM head counted once.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.analysis.layout import attention_linears, mlp_linears
from explorer.analysis.spec import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model.

    Attributes:
        total: every parameter, a tied LM head counted once.
        embedding: token embedding, learned position table and an untied LM head.
        non_embedding: total - embedding (the count Qwen's model cards call "Non-Embedding").
        active_per_token: parameters one token's forward pass uses: all of a dense model; for MoE
            the router and k of the E experts per layer, plus everything outside the experts.
    """

    total: int
    embedding: int
    non_embedding: int
    active_per_token: int


def norm_params(spec: ModelSpec, width: int) -> int:
    """Parameters of one norm over `width` features: weight (RMSNorm), weight and bias (LayerNorm)."""
    return width * (2 if spec.norm == "layernorm" else 1)


def layer_params(spec: ModelSpec, layer: int, active: bool = False) -> int:
    """Parameters of decoder layer `layer`.

    Args:
        spec: the model.
        layer: layer index.
        active: count only the k experts one token uses (MoE); the same as the total for dense layers.
    """
    count = sum(linear.params for linear in attention_linears(spec))
    for linear in mlp_linears(spec, layer):
        copies = spec.experts_per_token if active and linear.copies > 1 else linear.copies
        count += linear.params * copies
    count += spec.norms_per_layer * norm_params(spec, spec.hidden_size)
    if spec.qk_norm:
        count += 2 * spec.head_dim
    return count


def embedding_params(spec: ModelSpec) -> int:
    """V*d for the token table, d*positions for a learned position table, V*d more if the head is untied."""
    tables = 1 if spec.tie_word_embeddings else 2
    return tables * spec.vocab_size * spec.hidden_size + spec.position_table_rows * spec.hidden_size


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Total, embedding, non-embedding and active-per-token parameter counts of `spec`."""
    embedding = embedding_params(spec)
    final_norm = norm_params(spec, spec.hidden_size)
    layers = sum(layer_params(spec, i) for i in range(spec.n_layers))
    active_layers = sum(layer_params(spec, i, active=True) for i in range(spec.n_layers))
    return ParamCounts(
        total=embedding + layers + final_norm,
        embedding=embedding,
        non_embedding=layers + final_norm,
        active_per_token=embedding + active_layers + final_norm,
    )
