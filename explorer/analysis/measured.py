"""Measured points: a runner trace's per-operator wall times against the analytic FLOPs and bytes.

Achieved FLOP/s = analytic FLOPs / measured wall time; achieved bytes/s likewise. Plotted at the
operator's analytic arithmetic intensity, they sit below the roofline by the factor the
implementation loses to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from explorer.analysis.costs import step_costs, step_total, totals_by_op
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
    """The `Step` a trace ran: B and T from the embedding's [B, T] input, n from the trace, and in a
    mixture-of-experts model the experts each layer's executed routing reached (`trace.routing`).

    Raises:
        KeyError: the trace has no "embed" stop.
    """
    batch, tokens = trace.op("embed").input_shapes[0][:2]
    hit: list[int | None] = [None] * len(trace.kv) if trace.routing else []
    for record in trace.routing:
        hit[record.layer] = record.experts_hit
    return Step(trace.stage, batch, tokens, trace.context_length, tuple(hit))


def trace_precision(trace: StepTrace) -> Precision:
    """One format for weights, activations and KV: the output dtype of the trace's first GEMM.

    Raises:
        ConfigError: the dtype is not one the cost model knows.
    """
    dtype = next((op.dtype for op in trace.ops if op.kind == "gemm"), "float32")
    short = canonical_dtype(dtype)
    return Precision(weights=short, activations=short, kv=short)


def trace_options(trace: StepTrace) -> CostOptions:
    """The cost options the trace ran under: its own dtype, and the LM head over every position when
    the trace's `lm_head` took T rows (`--lm-head-all`), else over the last one as `generate` runs it."""
    head = next((op for op in trace.ops if op.name == "lm_head"), None)
    all_positions = head is not None and head.input_shapes[0][1] > 1
    return CostOptions(precision=trace_precision(trace), lm_head_all_positions=all_positions)


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
    options = options or trace_options(trace)
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
        options: how the cost model ran it: the trace's own format for weights, activations and KV
            (`trace_precision`), projections unmerged, eager attention, the LM head over the last
            position (as the runner computes it); a what-if's own (`scenario_costs`).
        by_op: the analytic costs summed per operator over the layers (`totals_by_op` of `step_costs`).
        total: the whole step's cost (`step_total`).
        measured: per operator summed over layers, (summed analytic cost, summed measured wall time in
            seconds), operators with FLOPs > 0 only (they have a place on a log axis); empty for a
            step with no wall times.
        device: where the step ran, e.g. "cpu", "cuda:0", "meta".
        launches: per operator of `measured`, how many stops were timed (L for a stop in every layer):
            each paid the machine's per-operator overhead.
    """

    stage: str
    step: Step
    options: CostOptions
    by_op: list[OpCost]
    total: OpCost
    measured: list[tuple[OpCost, float]]
    device: str
    launches: dict[str, int] = field(default_factory=dict)

    @property
    def precision(self) -> Precision:
        """The formats of weights, activations and the KV cache."""
        return self.options.precision


def trace_costs(spec: ModelSpec, trace: StepTrace) -> StepCosts:
    """The step's costs in its own dtype (LM head over the positions the runner ran it on: `trace_options`)
    and its measured times per operator.

    Raises:
        KeyError: the trace has no "embed" stop (B and T come from it).
        ConfigError: the trace's dtype is not one the cost model knows.
    """
    step, options = step_from_trace(trace), trace_options(trace)
    costs = step_costs(spec, step, options)
    points = _measured(trace, costs)
    wall_s: dict[str, float] = {}
    launches: dict[str, int] = {}
    for point in points:
        wall_s[point.cost.op] = wall_s.get(point.cost.op, 0.0) + point.wall_ms / 1e3
        launches[point.cost.op] = launches.get(point.cost.op, 0) + 1
    measured = [(cost, wall_s[cost.name]) for cost in totals_by_op([p.cost for p in points]) if cost.flops > 0]
    return StepCosts(trace.stage, step, options, totals_by_op(costs), step_total(costs), measured, trace.device,
                     {cost.name: launches[cost.name] for cost, _ in measured})


def stop_costs(spec: ModelSpec, trace: StepTrace, layer: int) -> dict[str, OpCost]:
    """The analytic cost of each stop outside the layers and in decoder layer `layer`, by canonical
    name, in the trace's own dtype and LM-head positions (`trace_options`): what
    the forward-pass view's hover says a stop computes and moves.

    Raises:
        KeyError: the trace has no "embed" stop (B and T come from it).
        ConfigError: the trace's dtype is not one the cost model knows.
    """
    step, options = step_from_trace(trace), trace_options(trace)
    return {cost.name: cost for cost in step_costs(spec, step, options, layers=(layer,))}


@dataclass(frozen=True)
class Scenario:
    """The roofline view's what-if inputs: each None (or False) keeps the executed step's own value,
    so an empty scenario is the run as it ran (unmerged projections, eager attention, the LM head
    over the positions it ran on, the trace's dtype everywhere).

    Attributes:
        batch: B, sequences run together.
        context: n of the decode step (positions in the KV cache after its write).
        tokens: T of the prefill (prompt tokens; its n is T).
        weights, activations, kv: formats (`explorer.analysis.precision.DTYPE_BITS` names).
        merged: q/k/v and gate/up as one matrix each, as engines run them.
        fused: scores, softmax and weighted sum in one kernel (FlashAttention).
        lm_head_all: the LM head over all positions instead of the last.
        tp: R, tensor-parallel ranks (None or 1: one device): each rank's shard of the operators
            (`explorer.analysis.tensor_parallel.rank_spec`) and the collectives on `link`.
        link: the link between the ranks (`explorer.analysis.hardware.link_names`); None: "nvlink4".
    """

    batch: int | None = None
    context: int | None = None
    tokens: int | None = None
    weights: str | None = None
    activations: str | None = None
    kv: str | None = None
    merged: bool = False
    fused: bool = False
    lm_head_all: bool = False
    tp: int | None = None
    link: str | None = None

    @property
    def ranks(self) -> int:
        """R, 1 without tensor parallelism."""
        return self.tp or 1

    @property
    def link_name(self) -> str:
        """The link between the ranks: `link`, else NVLink 4."""
        return self.link or "nvlink4"

    @property
    def active(self) -> bool:
        """Whether anything differs from the executed step (a link alone, on one rank, does not)."""
        return (replace(self, tp=None, link=None) if self.ranks == 1 else self) != Scenario()

    def changes(self) -> list[str]:
        """What differs, in words: "B = 64", "n = 4096", "KV fp8", "merged projections", ..."""
        words = [f"{name} = {value:,}" for name, value in (("B", self.batch), ("n", self.context), ("T", self.tokens))
                 if value is not None]
        words += [f"{name} {value}" for name, value in (("weights", self.weights), ("activations", self.activations),
                                                         ("KV", self.kv)) if value]
        words += [name for name, on in (("merged projections", self.merged), ("fused attention", self.fused),
                                        ("LM head over all positions", self.lm_head_all)) if on]
        if self.ranks > 1:
            words.append(f"TP = {self.ranks} on {self.link_name}")
        return words

    def applied(self, step: Step, precision: Precision) -> tuple[Step, CostOptions]:
        """The executed `step` and its `precision` with this scenario's changes.

        Raises:
            ValueError: a batch, context or token count below 1.
        """
        batch = self.batch or step.batch
        tokens = (self.tokens or step.tokens) if step.stage == "prefill" else 1
        routed = step.experts_hit if (batch, tokens) == (step.batch, step.tokens) else ()  # the same rows routed
        if step.stage == "prefill":
            changed = Step("prefill", batch, tokens, tokens, routed)
        else:
            changed = Step("decode", batch, 1, self.context or step.context, routed)
        formats = {name: value for name, value in (("weights", self.weights), ("activations", self.activations),
                                                   ("kv", self.kv)) if value}
        return changed, CostOptions(precision=replace(precision, **formats), merged_projections=self.merged,
                                    fused_attention=self.fused, lm_head_all_positions=self.lm_head_all)


def scenario_costs(spec: ModelSpec, executed: StepCosts, scenario: Scenario) -> StepCosts:
    """The executed step's costs under `scenario` (no measured times: nothing ran). The device
    reads "what-if".

    Raises:
        ValueError: the scenario asks for fewer than one sequence, token or position.
        ConfigError: a format the cost model does not know.
        UsageError: more positions than the model's context window (`ModelSpec.check_positions`).
    """
    step, options = scenario.applied(executed.step, executed.precision)
    spec.check_positions(step.context)
    if executed.options.lm_head_all_positions:  # the run's own choice (--lm-head-all) stays unless changed
        options = replace(options, lm_head_all_positions=True)
    costs = step_costs(spec, step, options)
    return StepCosts(executed.stage, step, options, totals_by_op(costs), step_total(costs), [], "what-if")


SWEEP_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def sweeps(spec: ModelSpec, executed: StepCosts, scenario: Scenario,
           longest: int) -> tuple[tuple[str, tuple[StepCosts, ...]], ...]:
    """The step under `scenario` as the batch goes 1 -> 256 ("batch") and, for a decode step, as the
    context doubles up to `longest` (the model's context window) ("context"): the two slopes of
    a decode roofline (weight GEMMs gain intensity with B, attention does not; attention's cost
    grows with n). A prefill step sweeps the batch only. The context starts at 256 positions, or at
    1/16 of a smaller window (a 64-position GPT-2: 4 to 64), and ends at `longest` or 131,072."""
    batch = tuple(scenario_costs(spec, executed, replace(scenario, batch=b)) for b in SWEEP_BATCHES)
    if executed.stage != "decode":
        return (("batch", batch),)
    longest = min(longest, 2**17)
    first = 256 if longest >= 256 else max(1, longest // 16)
    contexts = [first * 2**k for k in range(18) if first * 2**k <= longest]
    context = tuple(scenario_costs(spec, executed, replace(scenario, context=n)) for n in contexts)
    return ("batch", batch), ("context", context)
