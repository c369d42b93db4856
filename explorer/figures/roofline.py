"""The roofline view: each operator of the prefill and of a decode step on a machine's roofline.

Left: arithmetic intensity (FLOP/byte) against attainable FLOP/s, log-log, one point per operator
summed over layers, the memory slope and compute roof of the chosen machine with its ridge point
(for the datasheet entry of the device the steps ran on, also the roofs measured there, dashed:
`explorer.figures.roofs`); optionally the measured points (analytic FLOPs over the traced wall
time) as open markers. Right:
each operator's time lower bound, so the operators that cost the time can be read by name.

Costs come from `explorer.analysis` (`trace_costs`, computed once per step by the `Run`, with the
trace's own dtype for weights, activations and KV cache); the figure places them on the machine's
roofline (`costs_roofline`).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import StepCosts
from explorer.analysis.records import OpCost
from explorer.analysis.roofline import RooflinePoint, StepRoofline, costs_roofline
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
    DECODE_COLOUR,
    PREFILL_COLOUR,
    base_layout,
    plain_label,
    set_layout,
    si_text,
    subplot_grid,
)

STAGE_COLOURS = {"prefill": PREFILL_COLOUR, "decode": DECODE_COLOUR}
# Per-row operators (norms, softmax, residuals) have the same intensity in prefill and decode: the
# smaller decode marker sits inside the prefill one instead of hiding it.
MARKER_SIZES = {"prefill": 14, "decode": 8}


def roofline_figure(stages: list[StepCosts], hardware: Hardware, step: int, measured: bool = False,
                    executed: list[StepCosts] | None = None, changes: list[str] | None = None,
                    sweeps: tuple[tuple[str, tuple[StepCosts, ...]], ...] = (),
                    measured_roofs: Hardware | None = None) -> go.Figure:
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
        sweeps: ("batch", costs as B grows) and ("context", costs as n grows), see
            `explorer.analysis.measured.sweeps`: drawn as a line per weight GEMM (batch) and per
            attention product (context).
        measured_roofs: where `hardware` is the datasheet entry of the device the steps ran on, its
            roofs as measured there (`explorer.runner.probe`): drawn beside the datasheet's, and its
            measured per-operator overhead gives the overhead ceilings the datasheet cannot.

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
        With sweeps, the traces
        "batch sweep" and "context sweep" (lines through each operator's points, None between
        operators; customdata "op, B = b" or "op, n = n"). The annotation named "conventions" says
        how the cost model counted (merged or not, fused or not, LM head, formats) and the machine's
        numbers, their sources in its hover.

    Raises:
        ConfigError: `hardware` lists no matmul rate for the steps' dtype nor a wider format (left to
            propagate: the caller says which machine cannot run it).
    """
    rooflines = [(costs, costs_roofline(costs.step, costs.by_op, costs.total, hardware, costs.precision))
                 for costs in stages]
    peak, peak_dtype = hardware.peak_flops_per_s(stages[0].precision.activations)
    measured_by_stage = {costs.stage: costs.measured for costs in stages} if measured else {}
    swept = [(name, [costs_roofline(c.step, c.by_op, c.total, hardware, c.precision) for c in costs])
             for name, costs in sweeps]
    intensities = [p.arithmetic_intensity for _, r in rooflines for p in r.points if p.cost.flops > 0 and p.cost.bytes]
    intensities += [p.arithmetic_intensity for _, rs in swept for r in rs for p in r.points
                    if p.cost.flops > 0 and p.cost.bytes]
    machines = [(hardware, peak, peak_dtype)]
    if measured_roofs is not None:
        machines.append((measured_roofs, *measured_roofs.peak_flops_per_s(stages[0].precision.activations)))
    ridges = [m_peak / m.memory_bandwidth_bytes_per_s for m, m_peak, _ in machines]
    x_min = min([min(intensities, default=1.0) / 3] + [r / 2 for r in ridges])
    x_max = max([max(intensities, default=1.0) * 3] + [r * 16 for r in ridges])
    x, y = roof_line(hardware, peak, x_min, x_max)
    overhead_s = hardware.op_overhead_s or (measured_roofs.op_overhead_s if measured_roofs else 0.0)
    lowest = min([x[0] * m.memory_bandwidth_bytes_per_s for m, _, _ in machines]
                 + [cost.flops / s for ops in measured_by_stage.values() for cost, s in ops])
    if overhead_s:  # the overhead ceilings sit under the measured points
        lowest = min([lowest] + [cost.flops / (c.launches.get(cost.name, 1) * overhead_s)
                                 for c in stages if measured for cost, _ in c.measured])
    scale, unit = flops_unit(peak)
    roof_title = f"Roofline of {hardware.name} ({peak_dtype} peak)<br>operators summed over layers"
    layout, cells = subplot_grid([roof_title, "Time lower bound per operator"], rows=1, cols=2,
                                 column_widths=[0.64, 0.36], horizontal_spacing=0.2)
    data = roof_traces(hardware, (x, y), scale, unit) + [sweep_trace(name, rs, scale) for name, rs in swept]
    if measured_roofs is not None:
        _, m_peak, m_dtype = machines[1]
        corners = roof_line(measured_roofs, m_peak, x_min, x_max)
        data += measured_roof_traces(measured_roofs, corners, m_dtype, scale, unit)
        layout["annotations"].append(measured_roof_label(measured_roofs, corners, m_dtype, scale, unit, peak))
    for costs, roofline in rooflines:
        data.append(analytic_trace(roofline, scale))
        data.append({**time_trace(roofline), **cells[1, 2]})
        if measured_by_stage.get(costs.stage):
            ops = measured_by_stage[costs.stage]
            data.append(measured_trace(costs.stage, ops, scale, unit, costs.device, roofline, measured_roofs))
            data.append({**measured_time_trace(costs.stage, ops), **cells[1, 2]})
            if overhead_s:
                data.append(overhead_trace(costs, overhead_s, scale))
    layout["annotations"] += roof_labels(hardware, (x, y), peak_dtype, scale, unit)
    layout["annotations"].append(conventions_note(stages[-1], hardware, peak_dtype, measured_roofs))
    layout["xaxis"].update(type="log", range=[np.log10(x[0]), np.log10(x[-1])], exponentformat="none",
                           title={"text": "arithmetic intensity (FLOP/byte)"})
    highest = max(m_peak for _, m_peak, _ in machines)
    layout["yaxis"].update(type="log", range=[np.log10(lowest / scale / 4), np.log10(highest / scale * 4)],
                           title={"text": f"attainable FLOP/s ({unit})"}, exponentformat="none",
                           separatethousands=True)
    layout["xaxis2"].update(type="log", title={"text": "time lower bound (µs)"}, exponentformat="none")
    layout["yaxis2"].update(type="category", autorange="reversed")
    layout.update(barmode="group", legend={"orientation": "h", "x": 0, "y": -0.14, "yanchor": "top"})
    fig = go.Figure(data=data, layout=layout)
    own = [costs_roofline(c.step, c.by_op, c.total, hardware, c.precision) for c in executed or []]
    title = _conclusion([r for _, r in rooflines], own, changes or [])
    base_layout(fig, "roofline", step, title, height=600)
    lines = title.count("<br>") + 1  # from the top down, above the panels' own titles
    return set_layout(fig, margin={"l": 60, "r": 20, "t": 44 + 22 * lines, "b": 110},
                      title={**fig.layout.title.to_plotly_json(), "yref": "container", "y": 1, "yanchor": "top",
                             "pad": {"t": 14}})


def analytic_trace(roofline: StepRoofline, scale: float) -> dict:
    """A scatter trace dict, left panel: one marker per operator with FLOPs > 0 at (arithmetic
    intensity, attainable FLOP/s / scale)."""
    stage = roofline.step.stage
    points = [p for p in roofline.points if p.cost.flops > 0 and p.cost.bytes > 0]  # 0 bytes: no intensity
    hover = [
        f"<b>{p.cost.name}</b> ({stage})<br>{si_text(p.cost.flops, 'FLOP')}, {si_text(p.cost.bytes, 'B')}<br>"
        f"intensity {p.arithmetic_intensity:.3g} FLOP/byte<br>{p.bound}-bound<br>"
        f"time lower bound {_duration(p.time_lower_bound_s)}"
        for p in points
    ]
    return {
        "type": "scatter", "name": f"{stage} analytic", "mode": "markers",
        "x": np.array([p.arithmetic_intensity for p in points], np.float32),
        "y": np.array([p.attainable_flops_per_s / scale for p in points], np.float32),
        "marker": {"color": STAGE_COLOURS[stage], "size": MARKER_SIZES[stage], "line": {"color": "white", "width": 1}},
        "customdata": [p.cost.name for p in points], "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>",
    }


def measured_trace(stage: str, ops: list[tuple[OpCost, float]], scale: float, unit: str, device: str,
                   roofline: StepRoofline | None = None, measured_roofs: Hardware | None = None) -> dict:
    """A scatter trace dict, left panel: open markers at (analytic intensity, analytic FLOPs / measured
    seconds / scale); with the stage's `roofline`, each hover sets the measured time beside the lower
    bound and says what share of the machine's bandwidth and peak the operator reached (and of the
    bandwidth measured here, with `measured_roofs`)."""
    achieved = np.array([cost.flops / seconds for cost, seconds in ops])
    bounds = {p.cost.name: p for p in roofline.points} if roofline else {}
    hover = [
        f"<b>{cost.name}</b> ({stage}, measured on {plain_label(device)})<br>{si_text(cost.flops, 'FLOP')} in "
        f"{_duration(seconds)}<br>achieved {rate / scale:.3g} {unit}<br>"
        f"intensity {cost.arithmetic_intensity:.3g} FLOP/byte" + _against_bound(bounds.get(cost.name), seconds)
        + (f", {cost.bytes / seconds / measured_roofs.memory_bandwidth_bytes_per_s:.1%} of the bandwidth measured "
           "here" if measured_roofs else "")
        for (cost, seconds), rate in zip(ops, achieved, strict=True)
    ]
    return {
        "type": "scatter", "name": f"{stage} measured", "mode": "markers",
        "x": np.array([cost.arithmetic_intensity for cost, _ in ops], np.float32),
        "y": (achieved / scale).astype(np.float32), "customdata": [cost.name for cost, _ in ops],
        "marker": {"color": STAGE_COLOURS[stage], "size": 10, "symbol": "circle-open", "line": {"width": 2}},
        "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>",
    }


def _against_bound(point: RooflinePoint | None, seconds: float) -> str:
    """"lower bound 1.2 µs, measured ×420: 0.2% of the bandwidth, 0.01% of the peak"."""
    if point is None or not point.time_lower_bound_s:
        return ""
    return (f"<br>lower bound {_duration(point.time_lower_bound_s)}: measured ×{seconds / point.time_lower_bound_s:,.3g}"
            f"<br>reached {point.cost.bytes / seconds / point.memory_bandwidth_bytes_per_s:.1%} of the bandwidth, "
            f"{point.cost.flops / seconds / point.peak_flops_per_s:.1%} of the peak")


def overhead_trace(costs: StepCosts, overhead_s: float, scale: float) -> dict:
    """The third roof, per measured operator: the FLOP/s it could reach if each of its launches (one
    per layer) took only the machine's per-operator overhead; a point at its ceiling is overhead-bound
    (what CUDA graphs and fused kernels remove)."""
    ops = [(cost, costs.launches.get(cost.name, 1)) for cost, _ in costs.measured]
    ceilings = np.array([cost.flops / (launches * overhead_s) for cost, launches in ops])
    hover = [f"<b>{cost.name}</b>: {launches} launch(es) × {_duration(overhead_s)} overhead (measured here) = "
             f"{_duration(launches * overhead_s)} at least, whatever its size: at most {ceiling / scale:.3g} "
             "in the axis unit" for (cost, launches), ceiling in zip(ops, ceilings, strict=True)]
    return {"type": "scatter", "name": f"{costs.stage} overhead ceiling", "mode": "markers",
            "x": np.array([cost.arithmetic_intensity for cost, _ in ops], np.float32),
            "y": (ceilings / scale).astype(np.float32), "customdata": [cost.name for cost, _ in ops],
            "marker": {"color": "#6e7781", "size": 14, "symbol": "line-ew-open", "line": {"width": 2}},
            "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>"}


def measured_time_trace(stage: str, ops: list[tuple[OpCost, float]]) -> dict:
    """A bar trace dict beside the lower bounds: each operator's measured time in µs (float32)."""
    return {"type": "bar", "name": f"{stage} measured time", "orientation": "h", "y": [c.name for c, _ in ops],
            "x": np.array([seconds * 1e6 for _, seconds in ops], np.float32), "showlegend": False,
            "marker": {"color": "rgba(0,0,0,0)", "line": {"color": STAGE_COLOURS[stage], "width": 1.5}},
            "hovertemplate": "%{y} (" + stage + "): measured %{x:.3g} µs<extra></extra>"}


def time_trace(roofline: StepRoofline) -> dict:
    """A bar trace dict (horizontal, no axes named: the caller places it): every operator's time lower
    bound in µs (float32), named on the y axis."""
    stage = roofline.step.stage
    points = roofline.points
    return {
        "type": "bar", "name": f"{stage} time", "orientation": "h", "y": [p.cost.name for p in points],
        "x": np.array([p.time_lower_bound_s * 1e6 for p in points], np.float32),
        "marker": {"color": STAGE_COLOURS[stage]}, "customdata": [p.bound for p in points], "showlegend": False,
        "hovertemplate": "%{y} (" + stage + "): %{x:.3g} µs, %{customdata}-bound<extra></extra>",
    }


def _conclusion(rooflines: list[StepRoofline], executed: list[StepRoofline], changes: list[str]) -> str:
    """The title: per stage, decode first, the time lower bound, the tokens/s it allows and the
    shares of attention and of weight GEMMs in it; with a what-if, a first line of what changed
    and the steps as they ran beside it."""
    parts = [f"{r.step.stage} ≥ {_duration(r.time_lower_bound_s)} (≤ {r.tokens_per_s:,.0f} tokens/s), "
             f"{r.memory_bound_fraction:.0%} memory-bound; attention {r.attention_fraction:.0%}, "
             f"weight GEMMs {r.weight_gemm_fraction:.0%} of it" for r in reversed(rooflines)]
    if not executed:
        return "Time lower bound: " + "<br>".join(parts)
    was = [f"{r.step.stage} ×{r.time_lower_bound_s / own.time_lower_bound_s:.3g} (attention {own.attention_fraction:.0%}"
           f" → {r.attention_fraction:.0%})" for r, own in zip(reversed(rooflines), reversed(executed), strict=True)]
    return f"What-if {', '.join(changes)}, against the run: " + ", ".join(was) + "<br>" + "<br>".join(parts)


def sweep_trace(name: str, rooflines: list[StepRoofline], scale: float) -> dict:
    """A line per operator through its points as the batch (weight GEMMs) or the context (the
    attention products) grows, a label at each end."""
    chosen = (lambda c: c.kind in ("gemm", "experts")) if name == "batch" else (lambda c: c.kind == "batched_gemm")
    symbol = "B" if name == "batch" else "n"
    values = [r.step.batch if name == "batch" else r.step.context for r in rooflines]
    xs, ys, labels, text = [], [], [], []
    for index, point in enumerate(rooflines[0].points):
        if not chosen(point.cost) or not point.cost.bytes:
            continue
        first = not xs  # its ends are labelled; the other operators' lines run alongside
        for value, roofline in zip(values, rooflines, strict=True):
            p = roofline.points[index]
            xs.append(p.arithmetic_intensity)
            ys.append(p.attainable_flops_per_s / scale)
            labels.append(f"{p.cost.name}, {symbol} = {value:,}")
            text.append(f"{symbol}={value:,}" if first and value in (values[0], values[-1]) else "")
        xs.append(None)
        ys.append(None)
        labels.append("")
        text.append("")
    return {"type": "scatter", "name": f"{name} sweep", "mode": "lines+markers+text", "x": xs, "y": ys,
            "customdata": labels, "text": text, "textposition": "top center", "textfont": {"size": 10},
            "line": {"color": "#8c959f" if name == "batch" else "#bf3989", "width": 1, "dash": "dot"},
            "marker": {"size": 4}, "hovertemplate": "%{customdata}<extra>" + name + " sweep</extra>"}


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
            "yshift": -78, "xanchor": "left", "yanchor": "top", "showarrow": False, "align": "left",
            "font": {"size": 11, "color": "#57606a"}}


def _duration(seconds: float) -> str:
    """Seconds as "12.34 µs", "4.644 ms" or "1.2 s" (four significant digits)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.4g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.4g} ms"
    return f"{seconds:.4g} s"
