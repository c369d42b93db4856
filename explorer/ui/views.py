"""A visitor's run and the drawing of its views: what each view needs is fetched here, then drawn by
the pure `explorer.figures.views` functions.

A `Visit` is what one browser tab holds (in `gr.State`): its `Run`, where that run's attention comes
from, and the live session that appends to it (None for a saved run). `view_data` fetches what the
view on screen needs, and only that: the shown layer's attention at each step (a matrix a long
session did not keep within its memory budget is recomputed from its kept queries and KV cache),
the steps' costs (computed once per step), the roofline's machine (the device the model runs on
is probed on its first use, here, not while drawing: "this-machine", or the measured roofs drawn
beside its datasheet entry), and a sampling preview (sampling re-run on stored logits; the
model is not run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.hardware import THIS_MACHINE, Hardware
from explorer.analysis.measured import scenario_costs, stop_costs, sweeps
from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD, first_token_column_sum
from explorer.config import SamplingSettings
from explorer.figures.sampling import same_sampling
from explorer.figures.views import ViewData, ViewOptions, draw
from explorer.run import AttentionSource, Run, SavedAttention
from explorer.runner.devices import roofline_hardware_key
from explorer.runner.probe import resolve_hardware, this_machine
from explorer.runner.sampling import resample
from explorer.runner.session import InferenceSession
from explorer.trace import StepTrace
from explorer.ui.export import remove_export
from explorer.ui.hosting import Limits

CLOSED = SavedAttention({}, "the page's session was freed")


@dataclass
class Visit:
    """One visitor's inference.

    Attributes:
        run: the steps shown.
        attention: where the run's attention probabilities come from.
        limits: what the app allows this visitor.
        session: the live session appending to `run`; None for a saved run (no model).
        export_path: the page's latest export on disk (`explorer.ui.export`), deleted with the visit.
        viewing: the earlier step the person chose in the step menu; None while the latest is shown.
        pending: (the earlier step shown, the decode steps asked for) while the page asks whether to
            continue from that step or from the latest one; None otherwise.
        lens_stat: what colours the logit lens (the view settings' choice, kept for every redraw).
        sink_threshold: the attention view's sink threshold (the view settings' choice).
        sink_sums: step index -> (its trace, [L, h] column sums of its attention on the first token),
            computed once per step on the attention view's first draw of it (`sink_sums`).
    """

    run: Run
    attention: AttentionSource
    limits: Limits
    session: InferenceSession | None = None
    export_path: Path | None = field(default=None, init=False, repr=False)
    viewing: int | None = field(default=None, init=False)
    pending: tuple[int, int] | None = field(default=None, init=False)
    lens_stat: str = field(default="top1", init=False)
    sink_threshold: float = field(default=DEFAULT_SINK_THRESHOLD, init=False)
    sink_sums: dict[int, tuple[StepTrace, np.ndarray]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def start(cls, session: InferenceSession, limits: Limits) -> Visit:
        """A visit over a live session (after its prefill)."""
        return cls(session.run, session.attention, limits, session)

    @classmethod
    def replay(cls, run: Run, attention: AttentionSource, limits: Limits) -> Visit:
        """A visit over a saved run (no model)."""
        return cls(run, attention, limits)

    @property
    def saved(self) -> bool:
        """True for a run read back from a file."""
        return self.session is None

    @property
    def open(self) -> bool:
        """Whether the visit holds steps (a freed visit holds none)."""
        return bool(self.run.steps)

    def close(self) -> None:
        """Free the session's KV cache and run, and delete the export (the page closed or started over)."""
        remove_export(self.export_path)
        self.export_path = None
        if self.session is not None:
            self.session.close()
        self.run, self.attention = Run(self.run.model, self.run.description, self.run.config), CLOSED


def view_data(visit: Visit, options: ViewOptions, view: str, preview: SamplingSettings | None = None) -> ViewData:
    """What `view` needs to be drawn at `options`, fetched from the visit's run, attention source,
    the probe and the sampler.

    Raises:
        SessionStateError: a saved run holds no attention for the shown layer and steps.
        ConfigError: the roofline's machine is unknown.
    """
    run = visit.run
    shown = run.step(options.step)
    if view == "forward" and run.spec is not None:
        steps = (0, shown.step_index) if shown.step_index > 0 else (0,)
        return ViewData(run, stop_costs=tuple(stop_costs(run.spec, run.step(step), options.layer) for step in steps))
    if view == "attention" and not shown.shape_only:
        blocks = tuple(visit.attention.probs(step, options.layer) for step in range(shown.step_index + 1))
        return ViewData(run, attention=blocks, sinks=every_layer_sinks(visit, shown.step_index))
    if view == "roofline" and run.spec is not None:
        steps = (0, shown.step_index) if shown.step_index > 0 else (0,)
        executed = tuple(run.costs(step) for step in steps)
        scenario = options.what_if
        measured = _measured_on(visit, shown.device, options.hardware)
        # a datasheet entry of the GPU the steps run on: its roofs as measured here beside them
        measured_roofs = this_machine(shown.device) if measured and options.hardware != THIS_MACHINE else None
        costs = tuple(scenario_costs(run.spec, own, scenario) for own in executed) if scenario.active else executed
        return ViewData(run, costs=costs, executed=executed if scenario.active else (),
                        sweeps=sweeps(run.spec, executed[-1], scenario, run.config.get("max_position_embeddings") or 4096),
                        hardware=roofline_machine(visit, options.hardware),
                        measured=measured, measured_roofs=measured_roofs)
    if view == "sampling" and preview is not None and shown.logits is not None and shown.sampling is not None \
            and not same_sampling(preview.to_dict(), shown.sampling.settings):
        # only settings that choose otherwise are a preview; the step's own are its record, not a re-draw
        context = run.ids[: shown.context_length]
        return ViewData(run, preview=resample(shown.logits, context, preview, preview.seed))
    return ViewData(run)


def every_layer_sinks(visit: Visit, step: int) -> np.ndarray | None:
    """[L, h] float64: the first token's importance for every layer and head at `step` (`explorer.analysis.sinks`),
    from every layer's attention at each step up to it; each step's sums are computed once (a
    512-token prefill of the embedded model reads its 30 layers' matrices once: see the README).
    None where the run lacks some layer's attention (a saved run that left it out)."""
    sums = []
    for index in range(step + 1):
        trace = visit.run.steps[index]
        held = visit.sink_sums.get(index)
        if held is None or held[0] is not trace:  # a branch replaced the step
            if not all(visit.attention.has(index, layer) for layer in range(len(trace.attention))):
                return None
            held = trace, np.stack([first_token_column_sum(visit.attention.probs(index, layer), trace.context_length)
                                    for layer in range(len(trace.attention))])
            visit.sink_sums[index] = held
        sums.append(held[1])
    return np.sum(sums, axis=0) / visit.run.steps[step].context_length


def render(visit: Visit, options: ViewOptions, view: str, preview: SamplingSettings | None = None) -> go.Figure:
    """The figure of one view (one of `explorer.figures.views.VIEWS`); for
    the sampling view, `preview` applies other settings to the step's stored logits."""
    return draw(view, view_data(visit, options, view, preview), options)


def roofline_machine(visit: Visit, hardware: str) -> Hardware:
    """The roofline's machine: a catalogue entry or file, or "this-machine", the measured roofs of the
    device the visit's model runs on (of the CPU for a saved run: its device is not this one).

    Raises:
        ConfigError: `hardware` is unknown.
    """
    return resolve_hardware(hardware, "cpu" if visit.saved else visit.run.latest.device)


def _measured_on(visit: Visit, device: str, hardware: str) -> bool:
    """Whether the step's measured points belong on `hardware`'s roofline: it is the machine the step
    ran on. A saved run's GPU cannot be named here (this machine may have none, or another), so its
    measured points show only for a CPU or MPS run on "this-machine"."""
    if device == "meta":
        return False
    if visit.saved:
        return not device.startswith("cuda") and hardware == THIS_MACHINE
    return hardware == roofline_hardware_key(device)
