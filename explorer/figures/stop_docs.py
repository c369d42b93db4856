"""What each stop computes, for the hovers of the forward-pass and journey views: its formula, its
shapes and weight in symbols (B, T, n, d, h_q, h_kv, d_h, d_ff, V: docs/concepts.md), the weight's
measured shape, and what inference engines do at that stop. The words are the stops' rows of the stop
catalogue (`explorer.stop_catalogue.CATALOGUE`); this module fits them to a family. Pure Python over traces.
"""

from __future__ import annotations

from explorer.families import Family
from explorer.stop_catalogue import CATALOGUE, NORM_WEIGHT
from explorer.trace import OpRecord

LAYER_NORM_FORMULA = "x̂ = (x − mean(x)) / √(var(x) + ε) ⊙ γ + β (LayerNorm)"


def stop_doc(relative: str, family: Family | None = None) -> tuple[str, str, str | None]:
    """(formula, shapes in symbols, weight in symbols as stored) of the stop `relative` (e.g.
    "attn.q_proj") in `family`: its catalogue row (the Llama block, also for None), with a LayerNorm's
    mean and bias where the family's norms are LayerNorms, and GPT-2's `Conv1D` layer GEMMs as X · W + b
    with W [in, out]; a stop the catalogue does not know (a saved run's own name) has ("", "", None)."""
    row = CATALOGUE.get(relative)
    formula, symbols, weight = (row.formula, row.symbols, row.weight) if row else ("", "", None)
    if family is None:
        return formula, symbols, weight
    if family.norm == "layernorm" and weight == NORM_WEIGHT:
        formula = LAYER_NORM_FORMULA
    if family.conv1d and weight and weight.startswith("W_") and relative != "lm_head":
        formula, weight = f"{formula.replace('ᵀ', '')} + b (Conv1D)", stored_symbols(weight, True)
    return formula, symbols, weight


def engine_note(relative: str) -> str:
    """What inference engines (vLLM, SGLang, TensorRT-LLM, llama.cpp) do at the stop `relative`, one
    line; "" for a stop the catalogue does not know or has no note for."""
    row = CATALOGUE.get(relative)
    return row.engines if row else ""


def stored_symbols(weight_symbols: str, in_out: bool) -> str:
    """A weight in symbols as the model stores it: "W_q [h_q·d_h, d]" (`nn.Linear`), or with `in_out`
    (GPT-2's `Conv1D`) "W_q [d, h_q·d_h]"."""
    if not in_out or " [" not in weight_symbols:
        return weight_symbols
    name, dims = weight_symbols.split(" [", 1)
    out_features, in_features = dims.rstrip("]").split(", ")
    return f"{name} [{in_features}, {out_features}]"


def weight_shape(op: OpRecord, vocab: int, in_out: bool = False) -> list[int] | None:
    """The weight a stop multiplies by, from its shapes: [out_features, in_features] for a GEMM
    (`nn.Linear`), [d] for a norm (d_h for QK-norm), [V, d] for the embedding; None for a stop without
    weights.

    Args:
        op: the stop.
        vocab: V, the vocabulary size (the embedding's shapes do not show it).
        in_out: the layers' GEMMs are GPT-2's `Conv1D`, stored [in_features, out_features] (its LM head
            is an `nn.Linear`, tied to the embedding).
    """
    if op.kind == "gemm":
        shape = [op.output_shapes[0][-1], op.input_shapes[0][-1]]
        return shape[::-1] if in_out and op.layer is not None else shape
    if op.kind == "norm":
        return [op.output_shapes[0][-1]]
    if op.name == "embed":
        return [vocab, op.output_shapes[0][-1]]
    return None
