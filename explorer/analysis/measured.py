"""Measured points: a runner trace's per-operator wall times against the analytic FLOPs and bytes.

Achieved FLOP/s = analytic FLOPs / measured wall time; achieved bytes/s likewise. Plotted at the
operator's analytic arithmetic intensity, they sit below the roofline by the factor the
implementation loses to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.analysis.costs import embed_cost, layer_costs, lm_head_cost, step_costs, step_total, totals_by_op
from explorer.analysis.precision import Precision, canonical_dtype
from explorer.analysis.records import CostOptions, OpCost, Step, norm_cost
from explorer.analysis.spec import ModelSpec
from explorer.trace import StepTrace


@dataclass(frozen=True)
class MeasuredPoint:
    """One traced operator with its analytic cost and its measured wall time.

    Attributes:
        cost: the analytic FLOPs and bytes of the stop.
        wall_ms: measured wall time, milliseconds (> 0).
    """

    cost: OpCost
    wall_ms: float

    @property
    def achieved_flops_per_s(self) -> float:
        """Analytic FLOPs / measured seconds, FLOP/s."""
        return self.cost.flops / (self.wall_ms / 1e3)

    @property
    def achieved_bytes_per_s(self) -> float:
        """Analytic bytes / measured seconds, bytes/s."""
        return self.cost.bytes / (self.wall_ms / 1e3)

    @property
    def arithmetic_intensity(self) -> float:
        """Analytic FLOP/byte (the x coordinate on the roofline)."""
        return self.cost.arithmetic_intensity


def step_from_trace(trace: StepTrace) -> Step:
    """The `Step` a trace ran: B and T from the embedding's [B, T] input, n from the trace.

    Raises:
        KeyError: the trace has no "embed" stop.
    """
    batch, tokens = trace.op("embed").input_shapes[0][:2]
    return Step(trace.stage, batch, tokens, trace.context_length)


def trace_precision(trace: StepTrace) -> Precision:
    """One format for weights, activations and KV: the output dtype of the trace's first GEMM.

    Raises:
        ConfigError: the dtype is not one the cost model knows.
    """
    dtype = next((op.dtype for op in trace.ops if op.kind == "gemm"), "float32")
    short = canonical_dtype(dtype)
    return Precision(weights=short, activations=short, kv=short)


def measured_points(trace: StepTrace, spec: ModelSpec, options: CostOptions | None = None) -> list[MeasuredPoint]:
    """Measured points for every traced stop that has a wall time and an analytic cost.

    Args:
        trace: a runner trace with `wall_ms` per stop.
        spec: the traced model.
        options: formats and choices; default: the trace's own dtype everywhere, LM head over the
            last position (as the runner computes it).

    Returns:
        Points in trace order; stops without a wall time (views), without cost (tokenize, sample)
        or with zero measured time are left out.
    """
    options = options or CostOptions(precision=trace_precision(trace))
    return _measured(trace, step_costs(spec, step_from_trace(trace), options))


def _measured(trace: StepTrace, costs: list[OpCost]) -> list[MeasuredPoint]:
    by_name = {cost.name: cost for cost in costs}
    return [MeasuredPoint(by_name[op.name], op.wall_ms) for op in trace.ops if op.name in by_name and op.wall_ms]


@dataclass(frozen=True)
class StepCosts:
    """A traced step as the roofline draws it, computed once per step (`trace_costs`).

    Attributes:
        stage: "prefill" or "decode".
        step: the step's B, T and n (`step_from_trace`).
        precision: the trace's own format for weights, activations and KV (`trace_precision`).
        by_op: the analytic costs summed per operator over the layers (`totals_by_op` of `step_costs`).
        total: the whole step's cost (`step_total`).
        measured: per operator summed over layers, (summed analytic cost, summed measured wall time in
            seconds), operators with FLOPs > 0 only (they have a place on a log axis); empty for a
            step with no wall times.
        device: where the step ran, e.g. "cpu", "cuda:0", "meta".
    """

    stage: str
    step: Step
    precision: Precision
    by_op: list[OpCost]
    total: OpCost
    measured: list[tuple[OpCost, float]]
    device: str


def trace_costs(spec: ModelSpec, trace: StepTrace) -> StepCosts:
    """The step's costs in its own dtype (LM head over the last position, as the runner computes it)
    and its measured times per operator.

    Raises:
        KeyError: the trace has no "embed" stop (B and T come from it).
        ConfigError: the trace's dtype is not one the cost model knows.
    """
    step, precision = step_from_trace(trace), trace_precision(trace)
    costs = step_costs(spec, step, CostOptions(precision=precision))
    points = _measured(trace, costs)
    wall_s: dict[str, float] = {}
    for point in points:
        wall_s[point.cost.op] = wall_s.get(point.cost.op, 0.0) + point.wall_ms / 1e3
    measured = [(cost, wall_s[cost.name]) for cost in totals_by_op([p.cost for p in points]) if cost.flops > 0]
    return StepCosts(trace.stage, step, precision, totals_by_op(costs), step_total(costs), measured, trace.device)


def stop_costs(spec: ModelSpec, trace: StepTrace, layer: int) -> dict[str, OpCost]:
    """The analytic cost of each stop outside the layers and in decoder layer `layer`, by canonical
    name, in the trace's own dtype (LM head over the last position, as the runner computes it): what
    the forward-pass view's hover says a stop computes and moves.

    Raises:
        KeyError: the trace has no "embed" stop (B and T come from it).
        ConfigError: the trace's dtype is not one the cost model knows.
    """
    step, options = step_from_trace(trace), CostOptions(precision=trace_precision(trace))
    costs = [embed_cost(spec, step, options), *layer_costs(spec, layer, step, options),
             norm_cost("final_norm", None, step.rows, spec.hidden_size, spec.norm, options.precision),
             lm_head_cost(spec, step, options)]
    return {cost.name: cost for cost in costs}
