"""A visitor's run and the drawing of its views.

A `Visit` is what one browser tab holds (in `gr.State`): its `Run`, where that run's attention comes
from, and the live session that appends to it (None for a saved run). `view_data` and `render` fetch
what the view on screen needs, and only that, and draw it (`explorer.figures.views.VIEW_TABLE`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.hardware import Hardware
from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD
from explorer.config import SamplingSettings
from explorer.figures import view_fetch
from explorer.figures.view_types import RunData, SinkSums, ViewOptions, ViewSources
from explorer.figures.views import VIEW_TABLE, draw
from explorer.run import AttentionSource, Run, SavedAttention
from explorer.runner.view_services import RUNNER_SERVICES
from explorer.ui.export import remove_export
from explorer.ui.hosting import Limits

if TYPE_CHECKING:
    from explorer.runner.session import InferenceSession

CLOSED = SavedAttention({}, "the page's session was freed")


@dataclass
class Visit:
    """One visitor's inference.

    Attributes:
        run: the steps shown.
        attention: where the run's attention probabilities come from.
        limits: what the app allows this visitor.
        session: the live session appending to `run`; None for a saved run (no model).
        exports: the page's latest exports on disk by kind ("run": the run as JSON, "view": the view
            on screen as HTML; `explorer.ui.export`), deleted with the visit.
        viewing: the earlier step the person chose in the step menu; None while the latest is shown.
        pending: (the earlier step shown, the decode steps asked for) while the page asks whether to
            continue from that step or from the latest one; None otherwise.
        lens_stat: what colours the logit lens (the view settings' choice, kept for every redraw).
        sink_threshold: the attention view's sink threshold (the view settings' choice).
        sink_sums: each step's sinks, computed once on the attention view's first draw of it
            (`explorer.figures.view_fetch.every_layer_sinks`).
        lab: the lab's latest experiment on this run, (its name, its result), redrawn when presenter
            mode changes; None until one ran.
        lock: held by whatever reads or changes the visit, a step of a run or a redraw, so one page's
            events do not interleave (a run's steps run beside the model queue's events:
            `explorer.ui.handlers.turns`); taken before the model's lock, never after it.
    """

    run: Run
    attention: AttentionSource
    limits: Limits
    session: InferenceSession | None = None
    exports: dict[str, Path] = field(default_factory=dict, init=False, repr=False)
    viewing: int | None = field(default=None, init=False)
    pending: tuple[int, int] | None = field(default=None, init=False)
    lens_stat: str = field(default="top1", init=False)
    sink_threshold: float = field(default=DEFAULT_SINK_THRESHOLD, init=False)
    sink_sums: SinkSums = field(default_factory=dict, init=False, repr=False)
    lab: tuple[str, Any] | None = field(default=None, init=False, repr=False)
    lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False, compare=False)

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
    def sources(self) -> ViewSources:
        """What the visit lends its views' data: its attention, the runner's services, its sinks."""
        return ViewSources(self.attention, RUNNER_SERVICES, self.saved, self.sink_sums)

    @property
    def open(self) -> bool:
        """Whether the visit holds steps (a freed visit holds none)."""
        return bool(self.run.steps)

    def close(self) -> None:
        """Free the session's KV cache and run, and delete the exports (the page closed or started over)."""
        for path in self.exports.values():
            remove_export(path)
        self.exports.clear()
        if self.session is not None:
            self.session.close()
        self.run, self.attention = Run(self.run.model, self.run.description, self.run.config), CLOSED


def view_data(visit: Visit, options: ViewOptions, view: str, preview: SamplingSettings | None = None) -> RunData:
    """What `view` needs to be drawn at `options` (its row of `VIEW_TABLE`), fetched from the visit's
    run; for the sampling view, `preview` applies other settings to the step's stored logits.

    Raises:
        SessionStateError: a saved run holds no attention for the shown layer and steps.
        ConfigError: the roofline's machine is unknown.
    """
    return VIEW_TABLE[view].fetch(visit.run, visit.sources, replace(options, preview=preview))


def render(visit: Visit, options: ViewOptions, view: str, preview: SamplingSettings | None = None) -> go.Figure:
    """The figure of one view (one of `explorer.figures.views.VIEWS`); for
    the sampling view, `preview` applies other settings to the step's stored logits."""
    return draw(view, view_data(visit, options, view, preview), options)


def every_layer_sinks(visit: Visit, step: int) -> np.ndarray | None:
    """[L, h]: the first token's importance for every layer and head at `step` of the visit's run
    (`explorer.figures.view_fetch.every_layer_sinks`); None where the run lacks some layer's attention."""
    return view_fetch.every_layer_sinks(visit.run, visit.attention, step, visit.sink_sums)


def roofline_machine(visit: Visit, hardware: str) -> Hardware:
    """The roofline's machine of the visit's run (`explorer.figures.view_fetch.roofline_machine`).

    Raises:
        ConfigError: `hardware` is unknown.
    """
    return view_fetch.roofline_machine(visit.run, hardware, RUNNER_SERVICES, visit.saved)


def own_hardware(visit: Visit, step: int) -> str:
    """The roofline machine the visit's views show at `step` unless another is chosen
    (`explorer.figures.view_fetch.own_hardware`)."""
    return view_fetch.own_hardware(visit.run.step(step).device, RUNNER_SERVICES, visit.saved)
