"""Per-operator cost records of a step (prefill of T tokens, or one decode step at context n).

`step_costs` walks the family's stops (`explorer.stops.stop_table`) and asks each stop's row of the
stop catalogue (`explorer.stop_catalogue.CATALOGUE`) for its records; the formulas are the rules of
`explorer.analysis.stop_costs`. `totals_by_op` sums them over layers. Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable

from explorer.analysis.records import CostOptions, OpCost, Step, summed
from explorer.analysis.spec import ModelSpec
from explorer.stop_catalogue import CATALOGUE
from explorer.stop_names import parse_stop_name
from explorer.stops import stop_table


def step_costs(spec: ModelSpec, step: Step, options: CostOptions | None = None,
               layers: Iterable[int] | None = None) -> list[OpCost]:
    """Every operator's cost record for `step`, in execution order.

    Args:
        spec: the model.
        step: the stage, batch B, tokens T and context n.
        options: formats, merged projections, LM head over all positions, fused attention.
        layers: the decoder layers to cost (those outside the layers always are); None: all L.

    Returns:
        "embed" (GPT-2: then "pos_embed" and "embed_add"), then "layers.{i}.<stop>" for each layer,
        then "final_norm" and "lm_head". Stops that move nothing (views, the GQA broadcast) and the
        CPU's (tokenize, sample, detokenize) have no record.
    """
    options = options or CostOptions()
    wanted = None if layers is None else set(layers)
    costs: list[OpCost] = []
    for name, _, layer in stop_table(spec.arch, spec.n_layers, step.stage, spec.moe_layers):
        rule = CATALOGUE[parse_stop_name(name)[1]].cost
        if rule is not None and (layer is None or wanted is None or layer in wanted):
            costs += rule(spec, layer, step, options)
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
