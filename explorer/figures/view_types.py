"""The types a view is drawn from: the view controls (`ViewOptions`), what a front end lends the
fetching of view data (`ViewSources`, with the runner's `ViewServices` passed in, so that nothing here
imports the runner), and one data type per view, holding the `Run` and what was fetched for it.

A view's data is fetched by its row of `explorer.figures.views.VIEW_TABLE` and drawn by its
`fig_<view>(data, options)`; a hand-built run and a hand-built data object draw every view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import Scenario, StepCosts
from explorer.analysis.records import OpCost
from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD
from explorer.analysis.tensor_parallel import StepCollectives
from explorer.config import SamplingSettings
from explorer.run import AttentionSource, Run
from explorer.trace import LensRecord, SamplingRecord, StepTrace

# step index -> (its trace, [L, h] column sums of its attention on the first token): what a front end
# keeps so that each step's sinks are computed once (`explorer.figures.view_fetch.every_layer_sinks`).
SinkSums = dict[int, tuple[StepTrace, np.ndarray | None]]


@dataclass(frozen=True)
class ViewOptions:
    """The view controls.

    Attributes:
        step: the step shown (0 = prefill, k = k-th decode step), within the run's steps.
        layer: the decoder layer of the journey and attention views, within the model's layers.
        average_heads: draw the mean over query heads instead of one panel per head.
        hardware: the roofline's machine: a catalogue key or "this-machine".
        presenter: larger text and stronger contrast, for a projector.
        zoom: first token of a `ZOOM_TOKENS`-token window of the attention matrix drawn at full
            resolution; None draws the whole matrix (pooled when it is long).
        what_if: the roofline's what-if (batch, context, formats, engine choices); empty: the run's own.
        lens_stat: what colours the logit lens's cells (`explorer.figures.lens.LENS_STATS`).
        sink_threshold: the attention view marks a head as a sink where its first token's importance
            exceeds this.
        preview: sampling view: other settings applied to the shown step's stored logits (the model
            is not run); None shows the step's own draw.
    """

    step: int
    layer: int
    average_heads: bool
    hardware: str
    presenter: bool = False
    zoom: int | None = None
    what_if: Scenario = Scenario()
    lens_stat: str = "top1"
    sink_threshold: float = DEFAULT_SINK_THRESHOLD
    preview: SamplingSettings | None = None


@dataclass(frozen=True)
class ViewServices:
    """What fetching view data needs from the runner (torch), lent by the front end.

    Attributes:
        resolve_hardware: (catalogue key or "this-machine", device) -> the machine; "this-machine"
            is the device's roofs, measured on first use. Raises ConfigError for an unknown key.
        measured_roofs: device -> its roofs as the probe measured them.
        hardware_key: device -> the catalogue key whose roofline its measured points belong on.
        resample: (logits [V] float32, the sequence's ids, settings, seed) -> the sampling of those
            logits under the settings (the model is not run).
    """

    resolve_hardware: Callable[[str, str], Hardware]
    measured_roofs: Callable[[str], Hardware]
    hardware_key: Callable[[str], str]
    resample: Callable[[np.ndarray, list[int], SamplingSettings, int], SamplingRecord]


@dataclass(frozen=True)
class ViewSources:
    """What a front end holds beside its run, for fetching view data.

    Attributes:
        attention: where the run's attention probabilities come from (a live session or a saved file).
        services: the runner's services (`explorer.runner.view_services.RUNNER_SERVICES`).
        saved: the run was read back from a file (no model, maybe another machine).
        sink_sums: the sinks computed so far for this run, filled in as views ask for them.
    """

    attention: AttentionSource
    services: ViewServices
    saved: bool = False
    sink_sums: SinkSums = field(default_factory=dict)


@dataclass(frozen=True)
class AttentionRows:
    """The query rows of a layer's stacked causal matrix (`stack_attention`) that the attention view draws.

    Attributes:
        values: [h_q, rows, n] float32 probabilities, NaN above the causal diagonal; with `key_factor`
            > 1, [h_q, rows, ceil(n / key_factor)] key-block masses (`explorer.analysis.pooling`).
        first_row: the absolute position of the first row (0: the whole matrix; a zoom window's start).
        key_factor: tokens per pooled block, 1 where `values` are probabilities.
    """

    values: np.ndarray
    first_row: int = 0
    key_factor: int = 1


@dataclass(frozen=True)
class RunData:
    """What the journey and KV-cache views draw: the run alone (its steps' traces)."""

    run: Run


@dataclass(frozen=True)
class ForwardData(RunData):
    """Forward-pass view.

    Attributes:
        stop_costs: the analytic cost of each stop of the shown layer and outside the layers, by
            canonical name, for the prefill then the shown decode step; empty where the cost model
            does not know the family.
    """

    stop_costs: tuple[dict[str, OpCost], ...] = ()


@dataclass(frozen=True)
class AttentionData(RunData):
    """Attention view.

    Attributes:
        rows: the shown layer's attention up to the shown step, whole, pooled or a zoom window's rows;
            None in shape-only mode.
        sinks: the first token's importance for every layer and head at the shown step ([L, h]);
            None where not every layer's attention is at hand.
    """

    rows: AttentionRows | None = None
    sinks: np.ndarray | None = None


@dataclass(frozen=True)
class SamplingData(RunData):
    """Sampling view.

    Attributes:
        preview: the shown step's stored logits sampled again with other settings; None: its own draw.
    """

    preview: SamplingRecord | None = None


@dataclass(frozen=True)
class RooflineData(RunData):
    """Roofline view.

    Attributes:
        costs: the prefill's `StepCosts`, then the shown decode step's (if one is shown), under the
            what-if where one is set; empty where the cost model does not know the family.
        executed: with a what-if: the steps' own `StepCosts`, for comparison.
        sweeps: ("batch", the decode step's costs as B goes 1 -> 256) and ("context", its costs as n
            grows), each a tuple of `StepCosts`.
        hardware: the machine.
        measured: the steps ran on `hardware`, so their measured points belong on it.
        measured_roofs: where `hardware` is the datasheet entry of the device the steps ran on: that
            device's roofs as the probe measured them, drawn beside the datasheet's.
        collectives: with a tensor-parallel what-if, each step's collectives on its link (`costs` are
            then one rank's); empty on one device.
    """

    costs: tuple[StepCosts, ...] = ()
    executed: tuple[StepCosts, ...] = ()
    sweeps: tuple[tuple[str, tuple[StepCosts, ...]], ...] = ()
    hardware: Hardware | None = None
    measured: bool = False
    measured_roofs: Hardware | None = None
    collectives: tuple[StepCollectives, ...] = ()


@dataclass(frozen=True)
class LensData(RunData):
    """Logit-lens view.

    Attributes:
        lens: the logit lens of each step up to the shown one (`Run.lens`; None for a step without one).
    """

    lens: tuple[LensRecord | None, ...] = ()
