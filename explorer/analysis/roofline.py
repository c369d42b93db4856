"""The roofline of a step on a machine: per operator the arithmetic intensity, attainable FLOP/s,
memory- or compute-bound, and a time lower bound; step totals; what-ifs.

Model (Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4)): attainable FLOP/s =
min(peak FLOP/s, intensity * memory bandwidth); time lower bound = max(FLOPs / peak, bytes /
bandwidth) (docs/concepts.md). Matmuls compute at the activation format's peak (weight-only formats
are de-quantised to it). Elementwise operators run on vector units whose peak is lower, but all
of them sit far below the ridge point, so their bound is the memory term either way; the bound
stays a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.analysis.costs import step_costs, step_total, totals_by_op
from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import Scenario
from explorer.analysis.precision import Precision
from explorer.analysis.records import CostOptions, OpCost, Step
from explorer.analysis.spec import ModelSpec


@dataclass(frozen=True)
class RooflinePoint:
    """One operator on the roofline.

    Attributes:
        cost: its FLOPs and bytes.
        peak_flops_per_s: the machine's peak for the compute format.
        peak_dtype: the format whose peak applies (may be wider than asked: see `Hardware`).
        memory_bandwidth_bytes_per_s: the machine's peak bandwidth.
    """

    cost: OpCost
    peak_flops_per_s: float
    peak_dtype: str
    memory_bandwidth_bytes_per_s: float

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (FLOP/byte)."""
        return self.cost.arithmetic_intensity

    @property
    def attainable_flops_per_s(self) -> float:
        """min(peak, intensity * bandwidth), FLOP/s."""
        return min(self.peak_flops_per_s, self.arithmetic_intensity * self.memory_bandwidth_bytes_per_s)

    @property
    def compute_time_s(self) -> float:
        """FLOPs / peak FLOP/s, seconds."""
        return self.cost.flops / self.peak_flops_per_s

    @property
    def memory_time_s(self) -> float:
        """bytes / bandwidth, seconds."""
        return self.cost.bytes / self.memory_bandwidth_bytes_per_s

    @property
    def time_lower_bound_s(self) -> float:
        """max(compute time, memory time), seconds."""
        return max(self.compute_time_s, self.memory_time_s)

    @property
    def bound(self) -> str:
        """"compute" when the compute time is the larger, else "memory"."""
        return "compute" if self.compute_time_s > self.memory_time_s else "memory"


@dataclass(frozen=True)
class StepRoofline:
    """A step's operators on one machine.

    Attributes:
        step: the step analysed.
        precision: the formats used.
        hardware: the machine.
        points: one per operator (summed over layers when built with `by_op=True`).
        total: the whole step as one point (intensity and bound of the step's totals).
    """

    step: Step
    precision: Precision
    hardware: Hardware
    points: list[RooflinePoint]
    total: RooflinePoint

    @property
    def time_lower_bound_s(self) -> float:
        """Sum of the operators' lower bounds (operators run one after another), seconds."""
        return sum(point.time_lower_bound_s for point in self.points)

    @property
    def tokens_per_s(self) -> float:
        """B*T tokens over the time lower bound: an upper bound on throughput, tokens/s."""
        return self.step.rows / self.time_lower_bound_s

    @property
    def attention_fraction(self) -> float:
        """Share of the time lower bound in attention itself (the `attn.*` operators that are not
        weight GEMMs: RoPE, the KV-cache write, scores, softmax, weighted sum), 0..1."""
        return self._fraction(lambda cost: cost.op.startswith("attn.") and cost.kind != "gemm")

    @property
    def weight_gemm_fraction(self) -> float:
        """Share of the time lower bound in weight GEMMs (projections, MLP or experts, LM head), 0..1."""
        return self._fraction(lambda cost: cost.kind in ("gemm", "experts"))

    def _fraction(self, chosen) -> float:
        return sum(p.time_lower_bound_s for p in self.points if chosen(p.cost)) / self.time_lower_bound_s

    @property
    def memory_bound_fraction(self) -> float:
        """Share of the time lower bound spent in memory-bound operators (0..1)."""
        memory = sum(p.time_lower_bound_s for p in self.points if p.bound == "memory")
        return memory / self.time_lower_bound_s


def roofline_points(costs: list[OpCost], hardware: Hardware, precision: Precision) -> list[RooflinePoint]:
    """Place each cost record on the machine's roofline (matmul peak of the activation format).

    Raises:
        ConfigError: the machine has no rate for the activation format or a wider one.
    """
    peak, peak_dtype = hardware.peak_flops_per_s(precision.activations)
    return [RooflinePoint(cost, peak, peak_dtype, hardware.memory_bandwidth_bytes_per_s) for cost in costs]


def step_roofline(spec: ModelSpec, step: Step, hardware: Hardware, options: CostOptions | None = None,
                  by_op: bool = True) -> StepRoofline:
    """The roofline of a step: one point per operator and the step total.

    Args:
        spec: the model.
        step: prefill or decode, batch, tokens, context.
        hardware: the machine.
        options: formats and engine choices (`CostOptions`).
        by_op: sum each operator over the layers (one point per operator kind) instead of one per stop.
    """
    options = options or CostOptions()
    costs = step_costs(spec, step, options)
    return costs_roofline(step, totals_by_op(costs) if by_op else costs, step_total(costs), hardware,
                          options.precision)


def costs_roofline(step: Step, costs: list[OpCost], total: OpCost, hardware: Hardware,
                   precision: Precision) -> StepRoofline:
    """`step_roofline` from costs already computed: one point per record of `costs` (per stop, or
    summed per operator) and the step's `total`, in `precision`.

    Raises:
        ConfigError: the machine has no rate for the activation format or a wider one.
    """
    total_point = roofline_points([total], hardware, precision)[0]
    return StepRoofline(step, precision, hardware, roofline_points(costs, hardware, precision), total_point)


@dataclass(frozen=True)
class WhatIf:
    """A variant of the step and its time lower bound next to the baseline's.

    Attributes:
        label: what changed, e.g. "KV cache in fp8".
        roofline: the variant's roofline.
        speedup: baseline time lower bound / variant's (> 1 is faster).
    """

    label: str
    roofline: StepRoofline
    speedup: float


def what_if(spec: ModelSpec, step: Step, hardware: Hardware, options: CostOptions, *, kv: str | None = None,
            weights: str | None = None, batch: int | None = None, context: int | None = None) -> StepRoofline:
    """The step's roofline with the KV format, weight format, batch or context changed (a prefill's
    context is its prompt length), `options`' engine choices kept."""
    prefill = step.stage == "prefill"
    scenario = Scenario(batch=batch, context=None if prefill else context, tokens=context if prefill else None,
                        weights=weights, kv=kv, merged=options.merged_projections, fused=options.fused_attention,
                        lm_head_all=options.lm_head_all_positions)
    new_step, new_options = scenario.applied(step, options.precision)
    spec.check_positions(new_step.context)
    return step_roofline(spec, new_step, hardware, new_options)


def standard_what_ifs(spec: ModelSpec, step: Step, hardware: Hardware,
                      options: CostOptions | None = None) -> list[WhatIf]:
    """KV cache in fp8, weights in int4, batch x4, context x4 (at most the context window; none where
    the step fills it already): each against the baseline.

    Speedups compare time per step; for batch and context changes the step does different work,
    so compare `tokens_per_s` too.
    """
    options = options or CostOptions()
    base = step_roofline(spec, step, hardware, options).time_lower_bound_s
    context = min(step.context * 4, spec.context_window or step.context * 4)
    variants = [
        ("KV cache in fp8", dict(kv="fp8")),
        ("weights in int4", dict(weights="int4")),
        (f"batch {step.batch * 4} (x4)", dict(batch=step.batch * 4)),
    ] + ([(f"context {context} (x{context / step.context:.3g})", dict(context=context))]
         if context > step.context else [])
    results = []
    for label, change in variants:
        variant = what_if(spec, step, hardware, options, **change)
        results.append(WhatIf(label, variant, base / variant.time_lower_bound_s))
    return results
