"""A machine's roofs on the roofline view's left panel: the memory slope and compute roof with the
ridge point and their labels, the measured cache slope, and the roofs measured here beside a
datasheet's (x FLOP/byte, y FLOP/s in the axis unit of `flops_unit`; both axes log).
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.hardware import Hardware
from explorer.figures.theme import plain_label, si_text

ROOF_COLOUR = "#333333"
SMALL_FONT = {"size": 12}


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
    cache = []
    if hardware.cache_bandwidth_bytes_per_s > hardware.memory_bandwidth_bytes_per_s:
        cache_x = np.array([x[0], peak / hardware.cache_bandwidth_bytes_per_s])
        cache = [{"type": "scatter", "name": "cache roof", "x": cache_x.astype(np.float32),
                  "y": (cache_x * hardware.cache_bandwidth_bytes_per_s / scale).astype(np.float32), "mode": "lines",
                  "line": {"color": ROOF_COLOUR, "width": 1, "dash": "dash"}, "showlegend": False,
                  "hovertemplate": f"cache slope {si_text(hardware.cache_bandwidth_bytes_per_s, 'B/s')}: a weight "
                                   "that stays in the caches is read this fast<extra></extra>"}]
    return cache + [
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


def measured_roof_traces(measured_roofs: Hardware, corners: tuple[np.ndarray, np.ndarray], peak_dtype: str,
                         scale: float, unit: str) -> list[dict]:
    """The device's roofline as measured here (dashed, in the legend) and its ridge point, beside the
    datasheet's; the hover gives the measured numbers' sources."""
    x, y = corners
    sources = sources_text(measured_roofs)
    return [
        {"type": "scatter", "name": "measured roofline", "x": x.astype(np.float32), "y": (y / scale).astype(np.float32),
         "mode": "lines", "line": {"color": ROOF_COLOUR, "width": 1.5, "dash": "dash"},
         "hovertext": [sources] * len(x),
         "hovertemplate": "measured here: %{x:.3g} FLOP/byte: at most %{y:.3g} " + unit
                          + "<br>%{hovertext}<extra></extra>"},
        {"type": "scatter", "name": "measured ridge point", "x": np.array([x[1]], np.float32),
         "y": np.array([y[1] / scale], np.float32), "mode": "markers", "showlegend": False,
         "marker": {"color": ROOF_COLOUR, "size": 9, "symbol": "diamond-open"},
         "hovertemplate": f"measured ridge point {x[1]:.3g} FLOP/byte ({peak_dtype})<extra></extra>"},
    ]


def measured_roof_label(measured_roofs: Hardware, corners: tuple[np.ndarray, np.ndarray], peak_dtype: str,
                        scale: float, unit: str, datasheet_peak_flops_per_s: float) -> dict:
    """"measured here: 812 TFLOP/s (bf16), 4.1 TB/s" at the right end, under both compute roofs and
    under the datasheet's ridge label (which runs right of its ridge point)."""
    x, y = corners
    text = (f"measured here: {y[1] / scale:,.3g} {unit} ({peak_dtype}), "
            f"{si_text(measured_roofs.memory_bandwidth_bytes_per_s, 'B/s')}")
    under = min(y[-1], datasheet_peak_flops_per_s)
    return {"name": "measured roofs", "x": np.log10(x[-1]), "y": np.log10(under / scale), "xref": "x", "yref": "y",
            "text": text, "showarrow": False, "xanchor": "right", "yanchor": "top", "yshift": -28,
            "font": SMALL_FONT, "hovertext": sources_text(measured_roofs)}


def sources_text(hardware: Hardware) -> str:
    """Each number's source, a line each ("field: source")."""
    return "<br>".join(f"{plain_label(field)}: {plain_label(source)}" for field, source in hardware.sources.items())
