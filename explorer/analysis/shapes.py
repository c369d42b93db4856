"""Predicted shapes of every stop of a forward pass, named as `explorer.stops` names them: each stop's
row of the stop catalogue (`explorer.stop_catalogue.CATALOGUE`) predicts its own
(`explorer.analysis.stop_shapes`). How many rows each expert of a mixture-of-experts layer gets is the
routing's (measured) or, before any routing, the expected load B*T*k/E (`expert_load`).
"""

from __future__ import annotations

from explorer.analysis.spec import ModelSpec
from explorer.analysis.stop_shapes import ShapeInputs, Shapes
from explorer.families import traced_family
from explorer.stop_catalogue import CATALOGUE
from explorer.stop_names import parse_stop_name
from explorer.stops import stop_table


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
    outside = ShapeInputs(spec, batch, tokens, context, lm_head_all)
    per_layer = [ShapeInputs(spec, batch, tokens, cache_length(spec, layer, tokens, context), lm_head_all)
                 for layer in range(spec.n_layers)]
    shapes: dict[str, Shapes] = {}
    for name, _, layer in stop_table(traced_family(spec.family), spec.n_layers, stage, spec.moe_layers):
        rule = CATALOGUE[parse_stop_name(name)[1]].shapes
        if rule is not None:
            shapes[name] = rule(outside if layer is None else per_layer[layer])
    return shapes


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
