"""What each view needs, fetched from a run, then drawn by the pure `explorer.figures.views` functions:
the one place both front ends (the app's handlers and the notebook `Explorer`) get a view's figure.

Only what the view asked for is fetched: the shown layer's attention at each step (a matrix a long
session did not keep within its memory budget is recomputed from its kept queries and KV cache),
the steps' costs (computed once per step), the roofline's machine (the device the model runs on
is probed on its first use, here, not while drawing: "this-machine", or the measured roofs drawn
beside its datasheet entry), a sampling preview (sampling re-run on stored logits; the model is
not run), and the logit lens of the steps shown (a live session computes a step's on its first request).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.hardware import THIS_MACHINE, Hardware
from explorer.analysis.measured import scenario_costs, stop_costs, sweeps
from explorer.analysis.pooling import stack_key_masses
from explorer.analysis.sinks import first_token_column_sum
from explorer.config import SamplingSettings
from explorer.figures.attention import pooling_factor, stack_attention, stack_rows
from explorer.figures.sampling import same_sampling
from explorer.figures.views import AttentionRows, ViewData, ViewOptions, draw, zoom_window
from explorer.run import AttentionSource, Run
from explorer.trace import StepTrace

# step index -> (its trace, [L, h] column sums of its attention on the first token): what a front end
# keeps so that each step's sinks are computed once (`every_layer_sinks`).
SinkSums = dict[int, tuple[StepTrace, np.ndarray | None]]


def view_data(run: Run, attention: AttentionSource, options: ViewOptions, view: str,
              preview: SamplingSettings | None = None, saved: bool = False,
              sink_sums: SinkSums | None = None) -> ViewData:
    """What `view` needs to be drawn at `options`, fetched from the run, its attention source, the
    probe and the sampler; `saved`: the run was read back from a file (no model, maybe another machine);
    `sink_sums`: the sinks computed so far for this run, filled in here (None: computed afresh).

    Raises:
        SessionStateError: a saved run holds no attention for the shown layer and steps.
        ConfigError: the roofline's machine is unknown.
    """
    shown = run.step(options.step)
    if view == "forward" and run.spec is not None:
        steps = (0, shown.step_index) if shown.step_index > 0 else (0,)
        return ViewData(run, stop_costs=tuple(stop_costs(run.spec, run.step(step), options.layer) for step in steps))
    if view == "attention" and not shown.shape_only:
        sinks = every_layer_sinks(run, attention, shown.step_index, {} if sink_sums is None else sink_sums)
        return ViewData(run, attention=attention_rows(run, attention, options, shown), sinks=sinks)
    if view == "roofline" and run.spec is not None:
        from explorer.runner.probe import this_machine  # torch: imported when a view needs it, not with the app

        steps = (0, shown.step_index) if shown.step_index > 0 else (0,)
        executed = tuple(run.costs(step) for step in steps)
        scenario = options.what_if
        measured = _measured_on(shown.device, options.hardware, saved)
        # a datasheet entry of the GPU the steps run on: its roofs as measured here beside them
        measured_roofs = this_machine(shown.device) if measured and options.hardware != THIS_MACHINE else None
        costs = tuple(scenario_costs(run.spec, own, scenario) for own in executed) if scenario.active else executed
        return ViewData(run, costs=costs, executed=executed if scenario.active else (),
                        sweeps=sweeps(run.spec, executed[-1], scenario, run.config.get("max_position_embeddings") or 4096),
                        hardware=roofline_machine(run, options.hardware, saved),
                        measured=measured, measured_roofs=measured_roofs)
    if view == "lens" and not shown.shape_only:
        return ViewData(run, lens=tuple(run.lens(step) for step in range(shown.step_index + 1)))
    if view == "sampling" and preview is not None and shown.logits is not None and shown.sampling is not None \
            and not same_sampling(preview.to_dict(), shown.sampling.settings):
        # only settings that choose otherwise are a preview; the step's own are its record, not a re-draw
        context = run.ids[: shown.context_length]
        from explorer.runner.sampling import resample

        return ViewData(run, preview=resample(shown.logits, context, preview, preview.seed))
    return ViewData(run)


def render(run: Run, attention: AttentionSource, options: ViewOptions, view: str,
           preview: SamplingSettings | None = None, saved: bool = False,
           sink_sums: SinkSums | None = None) -> go.Figure:
    """The figure of one view (one of `explorer.figures.views.VIEWS`) at `options` (`view_data`, then
    `draw`); for the sampling view, `preview` applies other settings to the step's stored logits."""
    return draw(view, view_data(run, attention, options, view, preview, saved, sink_sums), options)


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


def roofline_machine(run: Run, hardware: str, saved: bool = False) -> Hardware:
    """The roofline's machine: a catalogue entry or file, or "this-machine", the measured roofs of the
    device the run's model runs on (of the CPU for a saved run: its device is not this one).

    Raises:
        ConfigError: `hardware` is unknown.
    """
    from explorer.runner.probe import resolve_hardware

    return resolve_hardware(hardware, "cpu" if saved else run.latest.device)


def own_hardware(device: str, saved: bool = False) -> str:
    """The roofline machine a view shows unless another is chosen: the one a step on `device` ran on
    ("this-machine", or a GPU's catalogue entry); for a saved run, "this-machine" (the GPU it ran on,
    if any, cannot be named here)."""
    from explorer.runner.devices import roofline_hardware_key

    return THIS_MACHINE if saved else roofline_hardware_key(device)


def _measured_on(device: str, hardware: str, saved: bool) -> bool:
    """Whether the step's measured points belong on `hardware`'s roofline: it is the machine the step
    ran on. A saved run's GPU cannot be named here (this machine may have none, or another), so its
    measured points show only for a CPU or MPS run on "this-machine"."""
    if device == "meta":
        return False
    if saved:
        return not device.startswith("cuda") and hardware == THIS_MACHINE
    from explorer.runner.devices import roofline_hardware_key

    return hardware == roofline_hardware_key(device)
