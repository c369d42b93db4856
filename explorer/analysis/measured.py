"""Measured points: a runner trace's per-operator wall times against the analytic FLOPs and bytes.

Achieved FLOP/s = analytic FLOPs / measured wall time; achieved bytes/s likewise. Plotted at the
operator's analytic arithmetic intensity, they sit below the roofline by the factor the
implementation loses to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.analysis.costs import step_costs
from explorer.analysis.precision import Precision, canonical_dtype
from explorer.analysis.records import CostOptions, OpCost, Step
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
    costs = {cost.name: cost for cost in step_costs(spec, step_from_trace(trace), options)}
    return [
        MeasuredPoint(costs[op.name], op.wall_ms)
        for op in trace.ops
        if op.name in costs and op.wall_ms
    ]
