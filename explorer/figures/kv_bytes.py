"""The KV cache's bytes: what the cache tensors weigh, an MHA model's cache of equal size, and the
KV-cache view's right panel, the totals after each step.

Everything is read from the steps' `KVSnapshot`s (the cache tensors' shapes and measured bytes), so
shape-only runs (no values) have it too.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from explorer.figures.dims import coloured
from explorer.figures.theme import PREFILL_COLOUR
from explorer.journey import shape_text, step_label
from explorer.trace import KVSnapshot, StepTrace

UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
ELEMENT_DTYPES = {4: "float32", 2: "16-bit (float16 / bfloat16)", 1: "8-bit"}
MHA_COLOUR = "#777777"


def totals_traces(traces: list[StepTrace], totals: list[int], mha_totals: list[int], layout: dict) -> list[dict]:
    """The GQA (measured) and MHA (computed) totals over the steps, and that panel's axes (column 2)."""
    unit, scale = byte_unit(max(mha_totals))
    steps = [t.step_index for t in traces]
    added = [totals[0], *np.diff(totals).tolist()]
    hover = [f"{step_label(t)} · n = {t.context_length}<br>this step added {bytes_text(int(a))}"
             for t, a in zip(traces, added, strict=True)]
    lines = [{"type": "scatter", "x": steps, "y": np.array(values, np.float64) / scale, "name": name,
              "mode": "lines+markers" if len(steps) <= 64 else "lines", "line": {"dash": dash, "color": colour},
              "customdata": hover, "hovertemplate": f"%{{customdata}}<br>{name}: %{{y:.3g}} {unit}<extra></extra>"}
             for name, values, dash, colour in (("GQA (this model), measured", totals, "solid", PREFILL_COLOUR),
                                                ("MHA of equal size, computed", mha_totals, "dash", MHA_COLOUR))]
    ticks = {"tickmode": "auto", "nticks": 8} if len(steps) > 8 else {
        "tickmode": "array", "tickvals": steps, "ticktext": ["P" if s == 0 else str(s) for s in steps]}
    layout["xaxis2"].update(title={"text": "step (P = prefill)", "standoff": 4}, **ticks)
    layout["yaxis2"].update(title={"text": f"K + V ({unit})", "standoff": 2}, rangemode="tozero")
    return lines


def saving_note(step: int, total: int, mha_total: int, scale: int) -> dict:
    """What GQA saves at the current step, pointing at the MHA line's last point."""
    factor = mha_total / total if total else 1.0
    return {"x": step, "y": mha_total / scale, "xref": "x2", "yref": "y2", "ax": -20, "ay": 48, "xanchor": "right",
            "text": f"GQA: ×{factor:.3g} smaller,<br>saves {bytes_text(mha_total - total)}", "showarrow": True,
            "arrowhead": 2, "arrowcolor": MHA_COLOUR, "font": {"size": 12}, "align": "right"}



def total_bytes(kv: list[KVSnapshot]) -> int:
    """K + V bytes over all layers."""
    return sum(snap.key_bytes + snap.value_bytes for snap in kv)


def mha_bytes(kv: list[KVSnapshot], n_heads: int) -> int:
    """K + V bytes of an MHA model of equal size: each layer's bytes x h_q / h_kv."""
    return sum(round((snap.key_bytes + snap.value_bytes) * n_heads / snap.key_shape[1]) for snap in kv)


def element_bytes(snap: KVSnapshot) -> int:
    """Bytes per element of a layer's key tensor (key_bytes / its element count; 0 for an empty one)."""
    count = math.prod(snap.key_shape)
    return snap.key_bytes // count if count else 0


def position_bytes(snap: KVSnapshot) -> int:
    """One layer's K + V bytes per position: measured (K + V bytes / kv_len), or from its shape where
    it holds no position (B x h_kv x d_h for K and for V, x bytes per element)."""
    if snap.key_shape[2] > 0:
        return (snap.key_bytes + snap.value_bytes) // snap.key_shape[2]
    batch, heads, _, head_dim = snap.key_shape
    return batch * heads * (head_dim + snap.value_shape[3]) * element_bytes(snap)


def bytes_per_position(kv: list[KVSnapshot]) -> int:
    """K + V bytes one token position takes in the cache, over all layers: measured, each layer's
    (key_bytes + value_bytes) / kv_len; for B = 1 and equal shapes 2 x L x h_kv x d_h x bytes per element."""
    return sum(position_bytes(snap) for snap in kv)


def per_position_text(kv: list[KVSnapshot]) -> str:
    """`per position: 2 (K, V) × L = 30 layers × h_kv = 3 × d_h = 64 × 4 B = 45 KiB`, the product
    written out where the layers' shapes are equal (else the measured sum alone)."""
    shapes = Counter((tuple(s.key_shape[:2]), s.key_shape[3], s.value_shape[3], element_bytes(s)) for s in kv)
    measured = bytes_text(bytes_per_position(kv))
    if len(shapes) != 1:
        return f"per position (all {len(kv)} layers, measured: K + V bytes ÷ positions held): {measured}"
    (batch, heads), key_dim, value_dim, size = next(iter(shapes))
    dims = f"{coloured('d_h')} = {key_dim}" if key_dim == value_dim else f"(d_k + d_v) = ({key_dim} + {value_dim})"
    two = "2 (K, V) × " if key_dim == value_dim else ""
    batch_text = f"{coloured('B')} = {batch} × " if batch != 1 else ""
    return (f"per position: {two}{batch_text}L = {len(kv)} layers × {coloured('h_kv')} = {heads} × {dims} × "
            f"{size} B = {measured} (measured: K + V bytes ÷ positions held)")



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
    size = element_bytes(first)
    dtype = ELEMENT_DTYPES.get(size, f"{size} B per element")
    if len(counts) == 1:
        return f"K and V per layer: {shape_text(first.key_shape)} {dtype} ({coloured('[B, h_kv, n, d_h]')})"
    parts = ", ".join(f"{shape_text(list(shape))} in {count} layers" for shape, count in counts.items())
    return f"K and V per layer differ: {parts}, {dtype} ({coloured('[B, h_kv, n, d_h]')})"
