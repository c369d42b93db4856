"""The roofline view's traces, one function each: per operator its point on the roofline (analytic,
measured, and the overhead ceiling), its time lower bound and measured time as bars, and the sweeps'
lines as the batch or the context grows. Each returns a plotly trace dict; the caller places it on a
panel (`explorer.figures.roofline.roofline_figure`).
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import StepCosts
from explorer.analysis.records import OpCost
from explorer.analysis.roofline import RooflinePoint, StepRoofline
from explorer.analysis.tensor_parallel import StepCollectives
from explorer.figures.theme import DECODE_COLOUR, PREFILL_COLOUR, plain_label, si_text

STAGE_COLOURS = {"prefill": PREFILL_COLOUR, "decode": DECODE_COLOUR}
# Per-row operators (norms, softmax, residuals) have the same intensity in prefill and decode: the
# smaller decode marker sits inside the prefill one instead of hiding it.
MARKER_SIZES = {"prefill": 14, "decode": 8}


def analytic_trace(roofline: StepRoofline, scale: float) -> dict:
    """A scatter trace dict, left panel: one marker per operator with FLOPs > 0 at (arithmetic
    intensity, attainable FLOP/s / scale)."""
    stage = roofline.step.stage
    points = [p for p in roofline.points if p.cost.flops > 0 and p.cost.bytes > 0]  # 0 bytes: no intensity
    hover = [
        f"<b>{p.cost.name}</b> ({stage})<br>{si_text(p.cost.flops, 'FLOP')}, {si_text(p.cost.bytes, 'B')}<br>"
        f"intensity {p.arithmetic_intensity:.3g} FLOP/byte<br>{p.bound}-bound<br>"
        f"time lower bound {duration(p.time_lower_bound_s)}"
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
        f"{duration(seconds)}<br>achieved {rate / scale:.3g} {unit}<br>"
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
    return (f"<br>lower bound {duration(point.time_lower_bound_s)}: measured ×{seconds / point.time_lower_bound_s:,.3g}"
            f"<br>reached {point.cost.bytes / seconds / point.memory_bandwidth_bytes_per_s:.1%} of the bandwidth, "
            f"{point.cost.flops / seconds / point.peak_flops_per_s:.1%} of the peak")


def overhead_trace(costs: StepCosts, overhead_s: float, scale: float) -> dict:
    """The third roof, per measured operator: the FLOP/s it could reach if each of its launches (one
    per layer) took only the machine's per-operator overhead; a point at its ceiling is overhead-bound
    (what CUDA graphs and fused kernels remove)."""
    ops = [(cost, costs.launches.get(cost.name, 1)) for cost, _ in costs.measured]
    ceilings = np.array([cost.flops / (launches * overhead_s) for cost, launches in ops])
    hover = [f"<b>{cost.name}</b>: {launches} launch(es) × {duration(overhead_s)} overhead (measured here) = "
             f"{duration(launches * overhead_s)} at least, whatever its size: at most {ceiling / scale:.3g} "
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


def collectives_trace(stage: str, collectives: StepCollectives) -> dict:
    """A bar trace dict (horizontal, placed by the caller): the step's 2L + 1 all-reduces together and
    the logits' all-gather on the link, in µs (float32), named on the y axis beside the operators;
    the hover says each one's size, time and whether latency or bandwidth bounds it."""
    reduce, gather, count = collectives.all_reduce, collectives.gather, collectives.all_reduces
    ranks = reduce.ranks
    rows = ((f"all-reduce ×{count} (TP {ranks})", reduce, count), (f"all-gather of logits (TP {ranks})", gather, 1))
    return {
        "type": "bar", "name": f"{stage} collectives on {collectives.link.key}", "orientation": "h",
        "y": [label for label, _, _ in rows],
        "x": np.array([n * c.seconds * 1e6 for _, c, n in rows], np.float32),
        "marker": {"color": STAGE_COLOURS[stage], "pattern": {"shape": "/"}},
        "hovertext": [f"{label} ({stage}) on {collectives.link.name}: {n} × {si_text(c.payload_bytes, 'B')}, "
                      f"{duration(c.seconds)} each, {c.bound}-bound (computed)" for label, c, n in rows],
        "hovertemplate": "%{hovertext}<extra></extra>",
    }


def sweep_trace(name: str, rooflines: list[StepRoofline], scale: float) -> dict:
    """A line per operator through its points as the batch (weight GEMMs) or the context (the
    attention products) grows, the first operator's far end labelled ("B=256", "n=8,192"): its near
    end is the step as it ran, under that step's own markers, and the context sweep's two ends sit
    at one intensity (attention's does not grow with n), so labels there would overprint."""
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
            text.append(f"{symbol}={value:,}" if first and value == values[-1] else "")
        xs.append(None)
        ys.append(None)
        labels.append("")
        text.append("")
    return {"type": "scatter", "name": f"{name} sweep", "mode": "lines+markers+text", "x": xs, "y": ys,
            "customdata": labels, "text": text, "textfont": {"size": 10},
            # under the roof (the compute roof's own label is above it); the context's end above its line
            "textposition": "bottom center" if name == "batch" else "top center",
            "line": {"color": "#8c959f" if name == "batch" else "#bf3989", "width": 1, "dash": "dot"},
            "marker": {"size": 4}, "hovertemplate": "%{customdata}<extra>" + name + " sweep</extra>"}


def duration(seconds: float) -> str:
    """Seconds as "12.34 µs", "4.644 ms" or "1.2 s" (four significant digits)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.4g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.4g} ms"
    return f"{seconds:.4g} s"
