"""The KV-cache view: how much the cache holds after each step, per layer and in total, against an
MHA model of the same size (every query head with its own KV head).

Left: the total K + V bytes of all layers after each step up to the shown one, with the MHA
equivalent dashed. Right: each layer's K and V bytes after the shown step (a sliding-window layer
stands out as a shorter bar).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import plotly.graph_objects as go

from explorer.figures.dims import coloured
from explorer.figures.theme import DECODE_COLOUR, PREFILL_COLOUR, base_layout, set_layout, subplot_grid
from explorer.journey import shape_text, step_label
from explorer.trace import KVSnapshot, StepTrace

UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
ELEMENT_DTYPES = {4: "float32", 2: "16-bit (float16 / bfloat16)", 1: "8-bit"}
MHA_COLOUR = "#777777"


def kv_cache_figure(traces: list[StepTrace], n_heads: int, step: int) -> go.Figure:
    """Total KV-cache bytes over the steps and per layer at the current step, GQA against MHA.

    Args:
        traces: the prefill, then the decode steps up to and including the shown one (traces[-1]).
        n_heads: h_q, query heads; an MHA model of equal size keeps h_q KV heads per layer, so its
            cache is the GQA cache x h_q / h_kv (h_kv read from each layer's key_shape[1]).
        step: the step shown (0 = prefill), for `layout.meta`.

    Raises:
        ValueError: no traces, or the current step has no KV snapshot.
    """
    if not traces or not traces[-1].kv:
        raise ValueError("The KV-cache view needs at least one step with a KV snapshot.")
    current = traces[-1]
    totals = [total_bytes(t.kv) for t in traces]
    mha_totals = [mha_bytes(t.kv, n_heads) for t in traces]
    unit, scale = byte_unit(max(mha_totals))
    layout, cells = subplot_grid(["K + V of all layers after each step", f"K and V per layer after {step_label(current)}"],
                                 rows=1, cols=2, column_widths=[0.45, 0.55], horizontal_spacing=0.09)
    data = _totals(traces, totals, mha_totals, scale, unit, layout) + _layers(current, layout)
    layout["annotations"] += [
        _saving_note(current.step_index, totals[-1], mha_totals[-1], scale),
        {"text": shapes_text(current.kv), "xref": "paper", "yref": "paper", "x": 0, "y": 1, "yshift": 36,
         "xanchor": "left", "yanchor": "bottom", "showarrow": False, "font": {"size": 12, "color": "#555555"}},
    ]
    layout.update(barmode="stack", hovermode="closest", legend={
        "orientation": "h", "x": 1, "xanchor": "right", "y": -0.14, "yanchor": "top", "traceorder": "normal"})
    fig = go.Figure(data=[{**trace, **cells[1, col]} for trace, col in data], layout=layout)
    base_layout(fig, "kv_cache", step, f"KV cache after {step_label(current)}: {bytes_text(totals[-1])} "
                f"in {len(current.kv)} layers (MHA of equal size: {bytes_text(mha_totals[-1])})", height=500)
    return set_layout(fig, margin={"l": 70, "r": 20, "t": 120, "b": 60})


def _totals(traces: list[StepTrace], totals: list[int], mha_totals: list[int], scale: int, unit: str,
            layout: dict) -> list[tuple[dict, int]]:
    """The GQA and MHA totals over the steps (left panel, column 1), and that panel's axes."""
    steps = [t.step_index for t in traces]
    hover = [f"{step_label(t)} · n = {t.context_length}" for t in traces]
    lines = [({"type": "scatter", "x": steps, "y": np.array(values, np.float64) / scale, "name": name,
               "mode": "lines+markers", "line": {"dash": dash, "color": colour}, "customdata": hover,
               "hovertemplate": f"%{{customdata}}<br>{name}: %{{y:.3g}} {unit}<extra></extra>"}, 1)
             for name, values, dash, colour in (("GQA (this model)", totals, "solid", PREFILL_COLOUR),
                                                ("MHA of equal size", mha_totals, "dash", MHA_COLOUR))]
    ticks = {"tickmode": "auto", "nticks": 12} if len(steps) > 12 else {
        "tickmode": "array", "tickvals": steps,
        "ticktext": [step_label(t) if t.step_index == 0 else str(t.step_index) for t in traces]}
    layout["xaxis"].update(title={"text": "step (0 = prefill)"}, **ticks)
    layout["yaxis"].update(title={"text": f"K + V ({unit})"}, rangemode="tozero")
    return lines


def _saving_note(step: int, total: int, mha_total: int, scale: int) -> dict:
    """What GQA saves at the current step, pointing at the MHA line's last point."""
    factor = mha_total / total if total else 1.0
    return {"x": step, "y": mha_total / scale, "xref": "x", "yref": "y", "ax": -20, "ay": -28, "xanchor": "right",
            "text": f"GQA: ×{factor:.3g} smaller, saves {bytes_text(mha_total - total)}", "showarrow": True,
            "arrowhead": 2, "arrowcolor": MHA_COLOUR, "font": {"size": 12}}


def _layers(trace: StepTrace, layout: dict) -> list[tuple[dict, int]]:
    """Each layer's K and V bytes at the current step (right panel, column 2), and that panel's axes."""
    layers = [snap.layer for snap in trace.kv]
    unit, scale = byte_unit(max(snap.key_bytes + snap.value_bytes for snap in trace.kv))
    bars = []
    for name, colour, attr in (("K", PREFILL_COLOUR, "key"), ("V", DECODE_COLOUR, "value")):
        sizes = [getattr(snap, f"{attr}_bytes") for snap in trace.kv]
        hover = [f"layer {snap.layer} {name}: {shape_text(getattr(snap, f'{attr}_shape'))}, "
                 f"{bytes_text(size)}, {getattr(snap, f'{attr}_shape')[2]} positions"
                 for snap, size in zip(trace.kv, sizes, strict=True)]
        bars.append(({"type": "bar", "x": layers, "y": np.array(sizes, np.float64) / scale, "name": f"{name} per layer",
                      "marker": {"color": colour}, "hovertext": hover,
                      "hovertemplate": "%{hovertext}<extra></extra>"}, 2))
    layout["xaxis2"].update(title={"text": "layer"}, dtick=1 if len(layers) <= 16 else 2)
    layout["yaxis2"].update(title={"text": f"bytes per layer ({unit})"})
    return bars


def total_bytes(kv: list[KVSnapshot]) -> int:
    """K + V bytes over all layers."""
    return sum(snap.key_bytes + snap.value_bytes for snap in kv)


def mha_bytes(kv: list[KVSnapshot], n_heads: int) -> int:
    """K + V bytes of an MHA model of equal size: each layer's bytes x h_q / h_kv."""
    return sum(round((snap.key_bytes + snap.value_bytes) * n_heads / snap.key_shape[1]) for snap in kv)


def byte_unit(size_bytes: int) -> tuple[str, int]:
    """The largest binary unit that `size_bytes` reaches ("GiB", "MiB", "KiB"; "B" below 1 KiB)."""
    for name, scale in UNITS:
        if size_bytes >= scale:
            return name, scale
    return "B", 1


def bytes_text(size_bytes: int) -> str:
    """`3.42 MiB`, `812 B`."""
    unit, scale = byte_unit(size_bytes)
    return f"{size_bytes} B" if scale == 1 else f"{size_bytes / scale:.3g} {unit}"


def shapes_text(kv: list[KVSnapshot]) -> str:
    """`K and V per layer: [1, 3, 42, 64] float32`; where layers differ, each shape with its layer count."""
    counts = Counter(tuple(snap.key_shape) for snap in kv)
    first = kv[0]
    element_bytes = first.key_bytes // max(1, math.prod(first.key_shape))
    dtype = ELEMENT_DTYPES.get(element_bytes, f"{element_bytes} B per element")
    if len(counts) == 1:
        return f"K and V per layer: {shape_text(first.key_shape)} {dtype} ({coloured('[B, h_kv, n, d_h]')})"
    parts = ", ".join(f"{shape_text(list(shape))} in {count} layers" for shape, count in counts.items())
    return f"K and V per layer differ: {parts}, {dtype} ({coloured('[B, h_kv, n, d_h]')})"
