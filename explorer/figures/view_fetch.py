"""What each view needs, fetched from a run: one `<view>_data(run, sources, options)` per view, named in
its row of `explorer.figures.views.VIEW_TABLE`.

Only what the view asked for is fetched: the shown layer's attention at each step (a matrix a long
session did not keep within its memory budget is recomputed from its kept queries and KV cache),
the steps' costs (computed once per step), the roofline's machine (the device the model runs on
is probed on its first use, here, not while drawing: "this-machine", or the measured roofs drawn
beside its datasheet entry), a sampling preview (sampling re-run on stored logits; the model is
not run), and the logit lens of the steps shown (a live session computes a step's on its first
request). What needs the runner (the probe, the sampler) comes in `ViewSources.services`.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.hardware import THIS_MACHINE, Hardware, get_link
from explorer.analysis.measured import scenario_costs, stop_costs, sweeps
from explorer.analysis.pooling import stack_key_masses
from explorer.analysis.sinks import first_token_column_sum
from explorer.analysis.tensor_parallel import rank_spec, step_collectives
from explorer.figures.attention import pooling_factor, stack_attention, stack_rows, zoom_window
from explorer.figures.sampling import same_sampling
from explorer.figures.view_types import (
    AttentionData,
    AttentionRows,
    ForwardData,
    LensData,
    RooflineData,
    RunData,
    SamplingData,
    SinkSums,
    ViewOptions,
    ViewServices,
    ViewSources,
)
from explorer.run import AttentionSource, Run
from explorer.trace import StepTrace


def run_data(run: Run, sources: ViewSources, options: ViewOptions) -> RunData:
    """The journey and KV-cache views: the run's traces are all they draw."""
    return RunData(run)


def forward_data(run: Run, sources: ViewSources, options: ViewOptions) -> ForwardData:
    """The forward pass: each stop's analytic cost at the prefill and the shown step (none for a
    family the cost model does not know)."""
    if run.spec is None:
        return ForwardData(run)
    return ForwardData(run, stop_costs=tuple(stop_costs(run.spec, run.step(step), options.layer)
                                             for step in _steps_shown(run, options)))


def attention_data(run: Run, sources: ViewSources, options: ViewOptions) -> AttentionData:
    """The shown layer's attention rows and every layer's sinks (none in shape-only mode).

    Raises:
        SessionStateError: a saved run holds no attention for the shown layer and steps.
    """
    shown = run.step(options.step)
    if shown.shape_only:
        return AttentionData(run)
    sinks = every_layer_sinks(run, sources.attention, shown.step_index, sources.sink_sums)
    return AttentionData(run, rows=attention_rows(run, sources.attention, options, shown), sinks=sinks)


def sampling_data(run: Run, sources: ViewSources, options: ViewOptions) -> SamplingData:
    """The shown step's own draw, or `options.preview`'s on its stored logits where those settings
    choose otherwise (settings that choose as the step did are its record, not a re-draw)."""
    shown, preview = run.step(options.step), options.preview
    if preview is None or shown.logits is None or shown.sampling is None \
            or same_sampling(preview.to_dict(), shown.sampling.settings):
        return SamplingData(run)
    context = run.ids[: shown.context_length]
    return SamplingData(run, preview=sources.services.resample(shown.logits, context, preview, preview.seed))


def roofline_data(run: Run, sources: ViewSources, options: ViewOptions) -> RooflineData:
    """The steps' costs (under the what-if), the sweeps, the machine and whether the measured points
    belong on it.

    Raises:
        ConfigError: the roofline's machine or the what-if's link is unknown, or its TP degree does not
            divide the query heads, the KV heads or d_ff (named).
    """
    if run.spec is None:
        return RooflineData(run)
    shown, services, scenario = run.step(options.step), sources.services, options.what_if
    executed = tuple(run.costs(step) for step in _steps_shown(run, options))
    measured = _measured_on(shown.device, options.hardware, sources.saved, services)
    # a datasheet entry of the GPU the steps run on: its roofs as measured here beside them
    measured_roofs = services.measured_roofs(shown.device) if measured and options.hardware != THIS_MACHINE else None
    shard = rank_spec(run.spec, scenario.ranks)  # one rank's operators under tensor parallelism
    costs = tuple(scenario_costs(shard, own, scenario) for own in executed) if scenario.active else executed
    link, ranks = get_link(scenario.link_name), scenario.ranks
    collectives = tuple(step_collectives(run.spec, c.step, c.options, link, ranks) for c in costs) if ranks > 1 else ()
    return RooflineData(run, costs=costs, executed=executed if scenario.active else (),
                        sweeps=sweeps(shard, executed[-1], scenario, run.spec.context_window or 4096),
                        hardware=roofline_machine(run, options.hardware, services, sources.saved),
                        measured=measured, measured_roofs=measured_roofs, collectives=collectives)


def lens_data(run: Run, sources: ViewSources, options: ViewOptions) -> LensData:
    """The logit lens of every step up to the shown one (none in shape-only mode)."""
    shown = run.step(options.step)
    if shown.shape_only:
        return LensData(run)
    return LensData(run, lens=tuple(run.lens(step) for step in range(shown.step_index + 1)))


def _steps_shown(run: Run, options: ViewOptions) -> tuple[int, ...]:
    """The prefill, then the shown decode step where one is shown."""
    shown = run.step(options.step).step_index
    return (0, shown) if shown > 0 else (0,)


def attention_rows(run: Run, attention: AttentionSource, options: ViewOptions, shown: StepTrace) -> AttentionRows:
    """The rows of the shown layer's stacked matrix that the attention view draws at `shown`: a zoom
    window's rows; else, where the figure pools (`pooling_factor`), the key-block masses, the
    prefill's computed a block of query rows at a time; else the whole matrix (`stack_attention`).
    Each decode step adds one row, fetched whole."""
    layer, n, prompt = options.layer, shown.context_length, run.steps[0].context_length
    if options.zoom is not None:
        start, stop = zoom_window(options.zoom, n)
        prefill = attention.probs(0, layer, rows=(min(start, prompt), min(stop, prompt)))
        decode = [attention.probs(step, layer) for step in range(max(1, start - prompt + 1), stop - prompt + 1)]
        return AttentionRows(stack_rows(prefill, start, decode, n), first_row=start)
    decode = [attention.probs(step, layer) for step in range(1, shown.step_index + 1)]
    factor = pooling_factor(n, 1 if options.average_heads else shown.attention[layer].shape[0])
    if factor == 1:
        return AttentionRows(stack_attention([attention.probs(0, layer), *decode]))
    return AttentionRows(stack_key_masses(attention.probs(0, layer, key_factor=factor), decode, factor),
                         key_factor=factor)


def every_layer_sinks(run: Run, attention: AttentionSource, step: int, held: SinkSums) -> np.ndarray | None:
    """[L, h] float64: the first token's importance for every layer and head at `step` (`explorer.analysis.sinks`),
    from each step's sums over its queries of the weight on the first key: the ones the step took as it
    ran (`AttentionRecord.first_key_sums`), else (a run saved before them) from every layer's matrix,
    computed once per step and kept in `held` (a 2,048-token prefill of the embedded model: its 30
    layers' matrices, about 15 s here). None where neither is there (a saved run that left attention out)."""
    sums = []
    for index in range(step + 1):
        trace = run.steps[index]
        kept = held.get(index)
        if kept is None or kept[0] is not trace:  # a branch replaced the step
            kept = trace, _first_key_sums(trace, attention)
            held[index] = kept
        if kept[1] is None:
            return None
        sums.append(kept[1])
    return np.sum(sums, axis=0) / run.steps[step].context_length


def _first_key_sums(trace: StepTrace, attention: AttentionSource) -> np.ndarray | None:
    """[L, h] float64: each layer's sums over the step's queries of the weight on key 0 (0 for a
    sliding-window layer whose keys no longer start at the first token); None where unknown."""
    records, n = trace.attention, trace.context_length
    if all(record.first_key_sums is not None for record in records):
        return np.array([record.first_key_sums if record.shape[2] >= n else [0.0] * record.shape[0]
                         for record in records], dtype=np.float64)
    if not all(attention.has(trace.step_index, record.layer) for record in records):
        return None
    return np.stack([first_token_column_sum(attention.probs(trace.step_index, record.layer), n) for record in records])


def roofline_machine(run: Run, hardware: str, services: ViewServices, saved: bool = False) -> Hardware:
    """The roofline's machine: a catalogue entry or file, or "this-machine", the measured roofs of the
    device the run's model runs on (of the CPU for a saved run: its device is not this one).

    Raises:
        ConfigError: `hardware` is unknown.
    """
    return services.resolve_hardware(hardware, "cpu" if saved else run.latest.device)


def own_hardware(device: str, services: ViewServices, saved: bool = False) -> str:
    """The roofline machine a view shows unless another is chosen: the one a step on `device` ran on
    ("this-machine", or a GPU's catalogue entry); for a saved run, "this-machine" (the GPU it ran on,
    if any, cannot be named here)."""
    return THIS_MACHINE if saved else services.hardware_key(device)


def _measured_on(device: str, hardware: str, saved: bool, services: ViewServices) -> bool:
    """Whether the step's measured points belong on `hardware`'s roofline: it is the machine the step
    ran on. A saved run's GPU cannot be named here (this machine may have none, or another), so its
    measured points show only for a CPU or MPS run on "this-machine"."""
    if device == "meta":
        return False
    if saved:
        return not device.startswith("cuda") and hardware == THIS_MACHINE
    return hardware == services.hardware_key(device)
