"""The roofline view: each operator of the prefill and of a decode step on a machine's roofline.

Left: arithmetic intensity (FLOP/byte) against attainable FLOP/s, log-log, one point per operator
summed over layers, the memory slope and compute roof of the chosen machine with its ridge point;
optionally the measured points (analytic FLOPs over the traced wall time) as open markers. Right:
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
from explorer.analysis.roofline import StepRoofline, costs_roofline
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
ROOF_COLOUR = "#333333"
SMALL_FONT = {"size": 12}
# Per-row operators (norms, softmax, residuals) have the same intensity in prefill and decode: the
# smaller decode marker sits inside the prefill one instead of hiding it.
MARKER_SIZES = {"prefill": 14, "decode": 8}


def roofline_figure(stages: list[StepCosts], hardware: Hardware, step: int, measured: bool = False) -> go.Figure:
    """The prefill's and a decode step's operators on `hardware`'s roofline.

    Args:
        stages: the prefill's costs, then optionally the shown decode step's (`trace_costs`: B, T, n
            and the dtype come from each trace).
        hardware: the machine whose roofline is drawn; the peak is its matmul rate for the steps'
            dtype (or the next wider format it lists, see `Hardware.peak_flops_per_s`).
        step: step index shown (0 = prefill), written to `layout.meta`.
        measured: also draw measured points: per operator, the sum over layers of the analytic FLOPs
            over the sum of the traced `wall_ms`, at the same analytic intensity (open markers).

    Returns:
        A figure with `layout.meta == {"view": "roofline", "step": step}`. Left panel: the trace
        "roofline" (x FLOP/byte, y min(peak, x * bandwidth) in the y axis unit), the trace "ridge
        point", per stage the trace "<stage> analytic" (one marker per operator with FLOPs > 0; x
        float32 arithmetic intensity in FLOP/byte, y float32 attainable FLOP/s in the axis unit,
        customdata the operator name, e.g. "attn.q_proj") and, with `measured`, "<stage> measured"
        (achieved FLOP/s). Both axes log. Right panel: per stage the bar trace "<stage> time" (x
        float32 time lower bound in µs, y operator names, every operator).

    Raises:
        ConfigError: `hardware` lists no matmul rate for the steps' dtype nor a wider format (left to
            propagate: the caller says which machine cannot run it).
    """
    rooflines = [(costs, costs_roofline(costs.step, costs.by_op, costs.total, hardware, costs.precision))
                 for costs in stages]
    peak, peak_dtype = hardware.peak_flops_per_s(stages[0].precision.activations)
    measured_by_stage = {costs.stage: costs.measured for costs in stages} if measured else {}
    intensities = [p.arithmetic_intensity for _, r in rooflines for p in r.points if p.cost.flops > 0]
    x, y = roof_line(hardware, peak, min(intensities, default=1.0) / 3, max(intensities, default=1.0) * 3)
    lowest = min([y[0]] + [cost.flops / s for ops in measured_by_stage.values() for cost, s in ops])
    scale, unit = flops_unit(peak)
    roof_title = f"Roofline of {hardware.name} ({peak_dtype} peak)<br>operators summed over layers"
    layout, cells = subplot_grid([roof_title, "Time lower bound per operator"], rows=1, cols=2,
                                 column_widths=[0.64, 0.36], horizontal_spacing=0.2)
    data = roof_traces(hardware, (x, y), scale, unit)
    for costs, roofline in rooflines:
        data.append(analytic_trace(roofline, scale))
        if measured_by_stage.get(costs.stage):
            data.append(measured_trace(costs.stage, measured_by_stage[costs.stage], scale, unit, costs.device))
        data.append({**time_trace(roofline), **cells[1, 2]})
    layout["annotations"] += roof_labels(hardware, (x, y), peak_dtype, scale, unit)
    layout["xaxis"].update(type="log", range=[np.log10(x[0]), np.log10(x[-1])], exponentformat="none",
                           title={"text": "arithmetic intensity (FLOP/byte)"})
    layout["yaxis"].update(type="log", range=[np.log10(lowest / scale / 4), np.log10(peak / scale * 4)],
                           title={"text": f"attainable FLOP/s ({unit})"}, exponentformat="none",
                           separatethousands=True)
    layout["xaxis2"].update(type="log", title={"text": "time lower bound (µs)"}, exponentformat="none")
    layout["yaxis2"].update(type="category", autorange="reversed")
    layout.update(barmode="group", legend={"orientation": "h", "x": 0, "y": -0.14, "yanchor": "top"})
    fig = go.Figure(data=data, layout=layout)
    base_layout(fig, "roofline", step, _conclusion([r for _, r in rooflines]), height=580)
    return set_layout(fig, margin={"l": 60, "r": 20, "t": 90, "b": 90})


def flops_unit(peak_flops_per_s: float) -> tuple[float, str]:
    """(divisor, name) of the FLOP/s unit in which the machine's peak reads 1 to 999 (TFLOP/s, GFLOP/s
    or MFLOP/s)."""
    for divisor, name in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s")):
        if peak_flops_per_s >= divisor:
            return divisor, name
    return 1e6, "MFLOP/s"


def roof_line(hardware: Hardware, peak_flops_per_s: float, x_min: float, x_max: float) -> tuple[np.ndarray, np.ndarray]:
    """The roofline's corners: x [3] float64 FLOP/byte (x_min, ridge, x_max), y [3] FLOP/s = min(peak, x * bw)."""
    ridge = peak_flops_per_s / hardware.memory_bandwidth_bytes_per_s
    x = np.array([min(x_min, ridge / 2), ridge, max(x_max, ridge * 16)])
    return x, np.minimum(peak_flops_per_s, x * hardware.memory_bandwidth_bytes_per_s)


def roof_traces(hardware: Hardware, corners: tuple[np.ndarray, np.ndarray], scale: float, unit: str) -> list[dict]:
    """The roofline through its corners and its ridge point, as scatter trace dicts on the left panel.

    Args:
        hardware: the machine.
        corners: `roof_line`'s x [3] FLOP/byte and y [3] FLOP/s.
        scale: FLOP/s per unit of the y axis (see `flops_unit`); unit: its name.
    """
    x, y = corners
    ridge, peak = x[1], y[1]
    return [
        {"type": "scatter", "name": "roofline", "x": x.astype(np.float32), "y": (y / scale).astype(np.float32),
         "mode": "lines", "line": {"color": ROOF_COLOUR, "width": 2}, "showlegend": False,
         "hovertemplate": "%{x:.3g} FLOP/byte: at most %{y:.3g} " + unit + "<extra></extra>"},
        {"type": "scatter", "name": "ridge point", "x": np.array([ridge], np.float32),
         "y": np.array([peak / scale], np.float32), "mode": "markers", "showlegend": False,
         "marker": {"color": ROOF_COLOUR, "size": 9, "symbol": "diamond"},
         "hovertemplate": f"ridge point {ridge:.3g} FLOP/byte<extra></extra>"},
    ]


def roof_labels(hardware: Hardware, corners: tuple[np.ndarray, np.ndarray], peak_dtype: str, scale: float,
                unit: str) -> list[dict]:
    """Annotations placed where no point can be: below the memory slope's left end, below the roof
    right of the ridge, above the compute roof's right end (x and y in log10, as log axes want)."""
    x, y = corners
    ridge, peak = x[1], y[1]
    labels = [
        (ridge, peak, f"ridge {ridge:,.0f} FLOP/byte", "left", "top", 6, -10),
        (x[-1], peak, f"compute roof {peak / scale:,.3g} {unit} ({peak_dtype})", "right", "bottom", 0, 10),
        (x[0] * 1.2, y[0] * 1.2, f"memory slope {si_text(hardware.memory_bandwidth_bytes_per_s, 'B/s')}",
         "left", "top", 8, -8),
    ]
    return [{"x": np.log10(lx), "y": np.log10(ly / scale), "xref": "x", "yref": "y", "text": text,
             "showarrow": False, "xanchor": xanchor, "yanchor": yanchor, "xshift": xshift, "yshift": yshift,
             "font": SMALL_FONT} for lx, ly, text, xanchor, yanchor, xshift, yshift in labels]


def analytic_trace(roofline: StepRoofline, scale: float) -> dict:
    """A scatter trace dict, left panel: one marker per operator with FLOPs > 0 at (arithmetic
    intensity, attainable FLOP/s / scale)."""
    stage = roofline.step.stage
    points = [p for p in roofline.points if p.cost.flops > 0]
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


def measured_trace(stage: str, ops: list[tuple[OpCost, float]], scale: float, unit: str, device: str) -> dict:
    """A scatter trace dict, left panel: open markers at (analytic intensity, analytic FLOPs / measured
    seconds / scale)."""
    achieved = np.array([cost.flops / seconds for cost, seconds in ops])
    hover = [
        f"<b>{cost.name}</b> ({stage}, measured on {plain_label(device)})<br>{si_text(cost.flops, 'FLOP')} in "
        f"{_duration(seconds)}<br>achieved {rate / scale:.3g} {unit}<br>"
        f"intensity {cost.arithmetic_intensity:.3g} FLOP/byte"
        for (cost, seconds), rate in zip(ops, achieved, strict=True)
    ]
    return {
        "type": "scatter", "name": f"{stage} measured", "mode": "markers",
        "x": np.array([cost.arithmetic_intensity for cost, _ in ops], np.float32),
        "y": (achieved / scale).astype(np.float32), "customdata": [cost.name for cost, _ in ops],
        "marker": {"color": STAGE_COLOURS[stage], "size": 10, "symbol": "circle-open", "line": {"width": 2}},
        "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>",
    }


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


def _conclusion(rooflines: list[StepRoofline]) -> str:
    """The title: each stage's memory-bound share of its time lower bound, decode first."""
    parts = [
        f"{r.step.stage} {r.memory_bound_fraction:.0%} memory-bound (of {_duration(r.time_lower_bound_s)})"
        for r in reversed(rooflines)
    ]
    return f"Time lower bound: {' · '.join(parts)}"


def _duration(seconds: float) -> str:
    """Seconds as "12.3 µs", "4.56 ms" or "1.2 s"."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"
