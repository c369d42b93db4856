"""The KV-cache view: how much the cache holds after each step, per layer and in total, against an
MHA model of the same size (every query head with its own KV head).

Left: the total K + V bytes of all layers after each step up to the shown one, with the MHA
equivalent dashed. Right: each layer's K and V bytes after the shown step (a sliding-window layer
stands out as a shorter bar).
"""

from __future__ import annotations

import math
from collections import Counter

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.figures.theme import DECODE_COLOUR, PREFILL_COLOUR, base_layout
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
    fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55], horizontal_spacing=0.09,
                        subplot_titles=["K + V of all layers after each step",
                                        f"K and V per layer after {step_label(current)}"])
    _add_totals(fig, traces, totals, mha_totals, scale, unit)
    _add_layers(fig, current)
    base_layout(fig, "kv_cache", step, f"KV cache after {step_label(current)}: {bytes_text(totals[-1])} "
                f"in {len(current.kv)} layers (MHA of equal size: {bytes_text(mha_totals[-1])})", height=500)
    _add_saving_note(fig, current.step_index, totals[-1], mha_totals[-1], scale)
    fig.add_annotation(text=shapes_text(current.kv), xref="paper", yref="paper", x=0, y=1, yshift=36,
                       xanchor="left", yanchor="bottom", showarrow=False, font={"size": 12, "color": "#555555"})
    fig.update_layout(margin={"l": 70, "r": 20, "t": 120, "b": 60}, barmode="stack", hovermode="closest",
                      legend={"orientation": "h", "x": 1, "xanchor": "right", "y": -0.14, "yanchor": "top",
                              "traceorder": "normal"})
    return fig


def _add_totals(fig: go.Figure, traces: list[StepTrace], totals: list[int], mha_totals: list[int],
                scale: int, unit: str) -> None:
    steps = [t.step_index for t in traces]
    hover = [f"{step_label(t)} · n = {t.context_length}" for t in traces]
    for name, values, dash, colour in (("GQA (this model)", totals, "solid", PREFILL_COLOUR),
                                       ("MHA of equal size", mha_totals, "dash", MHA_COLOUR)):
        fig.add_trace(go.Scatter(x=steps, y=[v / scale for v in values], name=name, mode="lines+markers",
                                 line={"dash": dash, "color": colour}, customdata=hover,
                                 hovertemplate=f"%{{customdata}}<br>{name}: %{{y:.3g}} {unit}<extra></extra>"),
                      1, 1)
    fig.update_xaxes(title_text="step (0 = prefill)", tickmode="array", tickvals=steps,
                     ticktext=[step_label(t) if t.step_index == 0 else str(t.step_index) for t in traces],
                     row=1, col=1)
    if len(steps) > 12:
        fig.update_xaxes(tickmode="auto", nticks=12, row=1, col=1)
    fig.update_yaxes(title_text=f"K + V ({unit})", rangemode="tozero", row=1, col=1)


def _add_saving_note(fig: go.Figure, step: int, total: int, mha_total: int, scale: int) -> None:
    """What GQA saves at the current step, pointing at the MHA line's last point."""
    factor = mha_total / total if total else 1.0
    fig.add_annotation(x=step, y=mha_total / scale, xref="x", yref="y", ax=-20, ay=-28, xanchor="right",
                       text=f"GQA: ×{factor:.3g} smaller, saves {bytes_text(mha_total - total)}",
                       showarrow=True, arrowhead=2, arrowcolor=MHA_COLOUR, font={"size": 12})


def _add_layers(fig: go.Figure, trace: StepTrace) -> None:
    layers = [snap.layer for snap in trace.kv]
    unit, scale = byte_unit(max(snap.key_bytes + snap.value_bytes for snap in trace.kv))
    for name, colour, attr in (("K", PREFILL_COLOUR, "key"), ("V", DECODE_COLOUR, "value")):
        sizes = [getattr(snap, f"{attr}_bytes") for snap in trace.kv]
        hover = [f"layer {snap.layer} {name}: {shape_text(getattr(snap, f'{attr}_shape'))}, "
                 f"{bytes_text(size)}, {getattr(snap, f'{attr}_shape')[2]} positions"
                 for snap, size in zip(trace.kv, sizes, strict=True)]
        fig.add_trace(go.Bar(x=layers, y=[s / scale for s in sizes], name=f"{name} per layer",
                             marker={"color": colour}, hovertext=hover,
                             hovertemplate="%{hovertext}<extra></extra>"), 1, 2)
    fig.update_xaxes(title_text="layer", dtick=1 if len(layers) <= 16 else 2, row=1, col=2)
    fig.update_yaxes(title_text=f"bytes per layer ({unit})", row=1, col=2)


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
        return f"K and V per layer: {shape_text(first.key_shape)} {dtype} ([batch, h_kv, n, d_h])"
    parts = ", ".join(f"{shape_text(list(shape))} in {count} layers" for shape, count in counts.items())
    return f"K and V per layer differ: {parts}, {dtype} ([batch, h_kv, n, d_h])"
