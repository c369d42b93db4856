"""The roofline view: each operator of the prefill and of a decode step on a machine's roofline.

Left: arithmetic intensity (FLOP/byte) against attainable FLOP/s, log-log, one point per operator
summed over layers, the memory slope and compute roof of the chosen machine with its ridge point
(for the datasheet entry of the device the steps ran on, also the roofs measured there, dashed:
`explorer.figures.roofs`); optionally the measured points (analytic FLOPs over the traced wall
time) as open markers. Right:
each operator's time lower bound, so the operators that cost the time can be read by name.

Costs come from `explorer.analysis` (`trace_costs`, computed once per step by the `Run`, with the
trace's own dtype for weights, activations and KV cache); the figure places them on the machine's
roofline (`costs_roofline`). Each trace is built in `explorer.figures.roofline_traces`, the roofs in
`explorer.figures.roofs`.
"""


from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import StepCosts
from explorer.analysis.roofline import StepRoofline, costs_roofline
from explorer.analysis.tensor_parallel import StepCollectives
from explorer.figures.roofline_traces import (
    analytic_trace,
    collectives_trace,
    duration,
    measured_time_trace,
    measured_trace,
    overhead_trace,
    sweep_trace,
    time_trace,
)
from explorer.figures.roofs import (
    flops_unit,
    measured_roof_label,
    measured_roof_traces,
    roof_labels,
    roof_line,
    roof_traces,
    sources_text,
)
from explorer.figures.theme import (
    TITLE_ASCENT_PX,
    TITLE_TOP_PX,
    base_layout,
    plain_label,
    set_layout,
    si_text,
    subplot_grid,
)


def roofline_figure(stages: list[StepCosts], hardware: Hardware, step: int, measured: bool = False,
                    executed: list[StepCosts] | None = None, changes: list[str] | None = None,
                    sweeps: tuple[tuple[str, tuple[StepCosts, ...]], ...] = (),
                    measured_roofs: Hardware | None = None, collectives: list | None = None) -> go.Figure:
    """The prefill's and a decode step's operators on `hardware`'s roofline.

    Args:
        stages: the prefill's costs, then optionally the shown decode step's (`trace_costs`: B, T, n
            and the dtype come from each trace).
        hardware: the machine whose roofline is drawn; the peak is its matmul rate for the steps'
            dtype (or the next wider format it lists, see `Hardware.peak_flops_per_s`).
        step: step index shown (0 = prefill), written to `layout.meta`.
        measured: also draw measured points: per operator, the sum over layers of the analytic FLOPs
            over the sum of the traced `wall_ms`, at the same analytic intensity (open markers).
        executed: with a what-if, the steps as they ran: the title compares the what-if with them.
        changes: the what-if's changes in words (`Scenario.changes`), for the title.
        sweeps: ("batch", costs as B grows) and ("context", costs as n grows), `measured.sweeps`:
            a line per weight GEMM (batch) and per attention product (context).
        measured_roofs: where `hardware` is the datasheet entry of the device the steps ran on, its
            roofs as measured there (`explorer.runner.probe`): drawn beside the datasheet's, and its
            measured per-operator overhead gives the overhead ceilings the datasheet cannot.
        collectives: with tensor parallelism (`stages` one rank's), each stage's `StepCollectives`.

    Returns:
        A figure with `layout.meta == {"view": "roofline", "step": step}`. Left panel: the trace
        "roofline" (x FLOP/byte, y min(peak, x * bandwidth) in the y axis unit), the trace "ridge
        point", per stage the trace "<stage> analytic" (one marker per operator with FLOPs > 0; x
        float32 arithmetic intensity in FLOP/byte, y float32 attainable FLOP/s in the axis unit,
        customdata the operator name, e.g. "attn.q_proj") and, with `measured`, "<stage> measured"
        (achieved FLOP/s). Both axes log. Right panel: per stage the bar trace "<stage> time" (x
        float32 time lower bound in µs, y operator names, every operator). With `measured`, also
        "<stage> measured time" (bars, µs) beside the bounds and, where the machine's per-operator
        overhead was measured, "<stage> overhead ceiling" (per operator: its FLOPs over its launches
        times that overhead, the third roof). Where the machine's cache bandwidth was measured, the
        dashed "cache roof". With `measured_roofs`, the dashed "measured roofline" (same axes, in
        the legend, its sources in the hover), its "measured ridge point" and a label "measured here".
        With sweeps, the traces "batch sweep" and "context sweep" (lines through each operator's
        points, None between operators; customdata "op, B = b" or "op, n = n"). The annotation named
        "conventions" says how the cost model counted (merged or not, fused or not, LM head, formats)
        and the machine's numbers, their sources in its hover; with `collectives`, bars "<stage> collectives on <link>".

    Raises:
        ConfigError: `hardware` lists no matmul rate for the steps' dtype nor a wider format (left to
            propagate: the caller says which machine cannot run it).
    """
    rooflines = [_on(hardware, costs) for costs in stages]
    swept = [(name, [_on(hardware, c) for c in costs]) for name, costs in sweeps]
    roofs = _roofs(hardware, measured_roofs, stages[0].precision.activations,
                   rooflines + [r for _, rs in swept for r in rs])
    layout, cells = _panels(hardware, roofs.peak_dtype)
    data, notes = _roof_traces(roofs, swept)
    for costs, roofline in zip(stages, rooflines, strict=True):
        data += _stage_traces(costs, roofline, roofs, cells[1, 2], measured, measured_roofs)
    data += [{**collectives_trace(c.step.stage, sent), **cells[1, 2]} for c, sent in zip(stages, collectives or ())]
    layout["annotations"] += notes + roof_labels(hardware, roofs.corners, roofs.peak_dtype, roofs.scale, roofs.unit)
    layout["annotations"].append(conventions_note(stages[-1], hardware, roofs.peak_dtype, measured_roofs))
    _axes_and_legend(layout, roofs, stages if measured else [])
    fig = go.Figure(data=data, layout=layout)
    own = [_on(hardware, c) for c in executed or []]
    return _titled(fig, step, _conclusion(rooflines, own, changes or [], collectives or []))


@dataclass(frozen=True)
class _Roofs:
    """The machines on the left panel and the panel's scale.

    Attributes:
        machines: (machine, peak FLOP/s, the dtype of that peak) of the chosen machine, then of its
            roofs measured here, if given.
        span: (x_min, x_max) in FLOP/byte: a third of the lowest operator intensity to 3x the highest,
            widened to every machine's ridge point / 2 and x 16.
        corners: the chosen machine's roofline over `span` (`roof_line`: x [3] FLOP/byte, y [3] FLOP/s).
        scale: FLOP/s per unit of the y axis; unit: its name (`flops_unit` of the chosen machine's peak).
        overhead_s: the per-operator overhead in s, the chosen machine's or else the one measured here;
            0: not known.
    """

    machines: tuple[tuple[Hardware, float, str], ...]
    span: tuple[float, float]
    corners: tuple[np.ndarray, np.ndarray]
    scale: float
    unit: str
    overhead_s: float

    @property
    def peak_dtype(self) -> str:
        """The dtype whose peak the chosen machine's roof is drawn at."""
        return self.machines[0][2]


def _on(hardware: Hardware, costs: StepCosts) -> StepRoofline:
    """A step's costs placed on `hardware`'s roofline, with the step's own formats."""
    return costs_roofline(costs.step, costs.by_op, costs.total, hardware, costs.precision)


def _roofs(hardware: Hardware, measured_roofs: Hardware | None, dtype: str, rooflines: list[StepRoofline]) -> _Roofs:
    """The machines drawn (peaks for the steps' activation `dtype`) and the left panel's x span, which
    holds every operator of `rooflines` (the stages' and the sweeps') with FLOPs and bytes."""
    machines = [(hardware, *hardware.peak_flops_per_s(dtype))]
    if measured_roofs is not None:
        machines.append((measured_roofs, *measured_roofs.peak_flops_per_s(dtype)))
    intensities = [p.arithmetic_intensity for r in rooflines for p in r.points if p.cost.flops > 0 and p.cost.bytes]
    ridges = [m_peak / m.memory_bandwidth_bytes_per_s for m, m_peak, _ in machines]
    span = (min([min(intensities, default=1.0) / 3] + [r / 2 for r in ridges]),
            max([max(intensities, default=1.0) * 3] + [r * 16 for r in ridges]))
    peak = machines[0][1]
    overhead_s = hardware.op_overhead_s or (measured_roofs.op_overhead_s if measured_roofs else 0.0)
    return _Roofs(tuple(machines), span, roof_line(hardware, peak, *span), *flops_unit(peak), overhead_s)


def _panels(hardware: Hardware, peak_dtype: str) -> tuple[dict, dict[tuple[int, int], dict[str, str]]]:
    """The two panels, titled (`subplot_grid`'s layout and cells): the roofline, then the time bounds."""
    return subplot_grid([f"Roofline of {hardware.name} ({peak_dtype} peak)<br>operators summed over layers",
                         "Time lower bound per operator"], rows=1, cols=2, column_widths=[0.64, 0.36],
                        horizontal_spacing=0.2)


def _roof_traces(roofs: _Roofs, swept: list[tuple[str, list[StepRoofline]]]) -> tuple[list[dict], list[dict]]:
    """The left panel's lines: the chosen machine's roofline and ridge point, the sweeps, and the roofs
    measured here (dashed); and the latter's label, as (traces, annotations)."""
    hardware, peak, _ = roofs.machines[0]
    data = roof_traces(hardware, roofs.corners, roofs.scale, roofs.unit)
    data += [sweep_trace(name, rs, roofs.scale) for name, rs in swept]
    notes = []
    for machine, m_peak, m_dtype in roofs.machines[1:]:  # the roofs measured here
        corners = roof_line(machine, m_peak, *roofs.span)
        data += measured_roof_traces(machine, corners, m_dtype, roofs.scale, roofs.unit)
        notes.append(measured_roof_label(machine, corners, m_dtype, roofs.scale, roofs.unit, peak))
    return data, notes


def _stage_traces(costs: StepCosts, roofline: StepRoofline, roofs: _Roofs, time_cell: dict[str, str],
                  measured: bool, measured_roofs: Hardware | None) -> list[dict]:
    """One stage's traces: its operators' points (left) and time lower bounds (right, in `time_cell`);
    with `measured`, the measured points and times and, where the overhead is known, its ceilings."""
    data = [analytic_trace(roofline, roofs.scale), {**time_trace(roofline), **time_cell}]
    if measured and costs.measured:
        data.append(measured_trace(costs.stage, costs.measured, roofs.scale, roofs.unit, costs.device, roofline,
                                   measured_roofs))
        data.append({**measured_time_trace(costs.stage, costs.measured), **time_cell})
        if roofs.overhead_s:
            data.append(overhead_trace(costs, roofs.overhead_s, roofs.scale))
    return data


def _axes_and_legend(layout: dict, roofs: _Roofs, measured: list[StepCosts]) -> None:
    """Log axes: the left panel's from `roofs.span` and from under the lowest point drawn (a slope's
    left end, a measured point, an overhead ceiling of the `measured` stages) to over the highest
    peak; the right panel's time axis log, its operators in order; the legend under the panels."""
    x = roofs.corners[0]
    lowest = min([x[0] * m.memory_bandwidth_bytes_per_s for m, _, _ in roofs.machines]
                 + [cost.flops / s for c in measured for cost, s in c.measured])
    if roofs.overhead_s:  # the overhead ceilings sit under the measured points
        lowest = min([lowest] + [cost.flops / (c.launches.get(cost.name, 1) * roofs.overhead_s)
                                 for c in measured for cost, _ in c.measured])
    highest = max(m_peak for _, m_peak, _ in roofs.machines)
    layout["xaxis"].update(type="log", range=[np.log10(x[0]), np.log10(x[-1])], exponentformat="none",
                           title={"text": "arithmetic intensity (FLOP/byte)"})
    scale = roofs.scale
    layout["yaxis"].update(type="log", range=[np.log10(lowest / scale / 4), np.log10(highest / scale * 4)],
                           title={"text": f"attainable FLOP/s ({roofs.unit})"}, exponentformat="none",
                           separatethousands=True)
    layout["xaxis2"].update(type="log", title={"text": "time lower bound (µs)"}, exponentformat="none")
    layout["yaxis2"].update(type="category", autorange="reversed")
    # the legend at the figure's bottom edge, under the conventions note (`_titled` sizes the margin)
    layout.update(barmode="group", legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 0,
                                           "yanchor": "bottom", "yref": "container"})


# The bottom margin, from the plot down: the x axes' ticks and titles, the two-line conventions note,
# then the legend's rows (measured in Chromium: 20 px a row at 12 px text; a row of a 1280 px screen's
# figure holds LEGEND_ROW_PX wide of entries, each 40 px of symbol and gaps plus its name at ~7 px a letter).
AXIS_TITLE_PX, NOTE_PX, LEGEND_LINE_PX, LEGEND_ROW_PX = 62, 34, 21, 1100


def legend_rows(names: list[str]) -> int:
    """How many rows a horizontal legend of entries `names` takes on a 1280 px screen's figure."""
    rows, used = 1, 0.0
    for name in names:
        width = 40 + 7 * len(name)
        if used and used + width > LEGEND_ROW_PX:
            rows, used = rows + 1, 0.0
        used += width
    return rows


def _titled(fig: go.Figure, step: int, title: str) -> go.Figure:
    """`fig` with the view's meta and `title`, the top margin sized to the title's lines and the bottom
    one to the axes' titles, the conventions note and the legend's rows, so none is drawn over another."""
    base_layout(fig, "roofline", step, title, height=600)
    lines = title.count("<br>") + 1  # from the top down, above the panels' own titles
    shown = [t.name for t in fig.data if t.showlegend is not False and t.name]
    bottom = AXIS_TITLE_PX + NOTE_PX + LEGEND_LINE_PX * legend_rows(shown) + 8
    return set_layout(fig, margin={"l": 60, "r": 20, "t": 56 + 22 * lines, "b": bottom},
                      # plotly.js anchors a "top" title of several lines by its first line's baseline
                      title={**fig.layout.title.to_plotly_json(), "yref": "container", "yanchor": "top",
                             "y": 1 - (TITLE_TOP_PX + TITLE_ASCENT_PX) / 600})


def _conclusion(rooflines: list[StepRoofline], executed: list[StepRoofline], changes: list[str],
                collectives: list[StepCollectives]) -> str:
    """The title: per stage, decode first, the time lower bound, the tokens/s it allows and the
    shares of attention and of weight GEMMs in it (with `collectives`, one rank's operators, then a
    line of the collectives' time and share of each step); with a what-if, a first line of what
    changed and the steps as they ran beside it."""
    parts = [f"{r.step.stage} ≥ {duration(r.time_lower_bound_s)} (≤ {r.tokens_per_s:,.0f} tokens/s), "
             f"{r.memory_bound_fraction:.0%} memory-bound; attention {r.attention_fraction:.0%}, "
             f"weight GEMMs {r.weight_gemm_fraction:.0%} of it" for r in reversed(rooflines)]
    if collectives:
        shares = [f"{r.step.stage} + {duration(sent.seconds)} "
                  f"({sent.seconds / (sent.seconds + r.time_lower_bound_s):.0%} of the step, "
                  f"all-reduces {sent.all_reduce.bound}-bound)"
                  for r, sent in zip(reversed(rooflines), reversed(collectives), strict=True)]
        parts.append(f"Collectives on {collectives[0].link.name}: " + ", ".join(shares))
    if not executed:
        return "Time lower bound: " + "<br>".join(parts)
    was = [f"{r.step.stage} ×{r.time_lower_bound_s / own.time_lower_bound_s:.3g} (attention {own.attention_fraction:.0%}"
           f" → {r.attention_fraction:.0%})" for r, own in zip(reversed(rooflines), reversed(executed), strict=True)]
    return f"What-if {', '.join(changes)}, against the run: " + ", ".join(was) + "<br>" + "<br>".join(parts)


def conventions_note(costs: StepCosts, hardware: Hardware, peak_dtype: str,
                     measured_roofs: Hardware | None = None) -> dict:
    """How the cost model counted the steps and the machine's numbers (and those measured here, with
    `measured_roofs`); their sources on hover."""
    options, p = costs.options, costs.precision
    words = ["q/k/v and gate/up merged" if options.merged_projections else "projections unmerged (as transformers runs them)",
             "fused attention (scores stay on chip)" if options.fused_attention else "eager attention (scores written)",
             "LM head over all positions" if options.lm_head_all_positions else "LM head on the last position",
             f"weights {p.weights}, activations {p.activations}, KV {p.kv}"]
    peak, _ = hardware.peak_flops_per_s(peak_dtype)
    machine = (f"{plain_label(hardware.name)}: {si_text(peak, 'FLOP/s')} {peak_dtype}, "
               f"{si_text(hardware.memory_bandwidth_bytes_per_s, 'B/s')}")
    sources = sources_text(hardware)
    if measured_roofs is not None:
        m_peak, m_dtype = measured_roofs.peak_flops_per_s(peak_dtype)
        machine += (f"; measured here {si_text(m_peak, 'FLOP/s')} {m_dtype}, "
                    f"{si_text(measured_roofs.memory_bandwidth_bytes_per_s, 'B/s')}")
        sources += "<br>measured here:<br>" + sources_text(measured_roofs)
    return {"name": "conventions", "text": "Counted with " + " · ".join(words) + "<br>" + machine
            + " (hover: sources) · what-ifs (batch, context, formats): the settings, key S",
            "hovertext": sources or "no sources", "xref": "paper", "yref": "paper", "x": 0, "y": 0,
            "yshift": -AXIS_TITLE_PX, "xanchor": "left", "yanchor": "top", "showarrow": False, "align": "left",
            "font": {"size": 11, "color": "#57606a"}}
