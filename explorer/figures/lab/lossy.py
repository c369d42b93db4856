"""The lossy experiments' figure (weight and KV-cache quantization): one row per variant, one panel per
measure, so the cost in fidelity reads beside the bytes saved and the speed the roofline predicts."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.theme import DECODE_COLOUR, PREFILL_COLOUR, si_text, subplot_grid
from explorer.lab.fidelity import Variant


def fig_variants(variants: Sequence[Variant], view: str, title_segments: list[str], bytes_title: str,
                 hardware: str) -> go.Figure:
    """Five panels sharing the variants' axis (the float reference on top): mean KL over the shipped text,
    top-1 agreement, perplexity (measured), bytes per element (computed) and the predicted decode-step
    bound on `hardware` (estimated).

    Args:
        variants: the reference first, then each lossy variant.
        view: the figure's `layout.meta["view"]`, e.g. "lab-quant".
        title_segments: the title's pieces (wrapped to two or three lines).
        bytes_title: the bytes panel's title, e.g. "bytes / weight (computed)".
        hardware: the GPU the bound is predicted on (named in the title).
    """
    titles = ["KL from float, nats<br>(measured)", "top-1 agreement<br>(measured)",
              "perplexity of the text<br>(measured)", bytes_title, "decode bound, µs<br>(estimated)"]
    layout, axes = subplot_grid(titles, cols=5, shared_yaxes=True, horizontal_spacing=0.035)
    names = [variant.name for variant in variants][::-1]
    ordered = list(variants)[::-1]
    layout["yaxis"].update(autorange=True)
    columns = (
        [v.fidelity.text_kl_mean for v in ordered], [100 * v.fidelity.text_top1 for v in ordered],
        [v.fidelity.text_perplexity for v in ordered], [v.bytes_per_element for v in ordered],
        [v.predicted_step_s * 1e6 for v in ordered])
    formats = ("{:.2g}".format, "{:.1f}%".format, "{:.2f}".format, lambda value: si_text(value, "B"), _microseconds)
    fig = go.Figure(layout=layout)
    colours = [PREFILL_COLOUR if v is variants[0] else DECODE_COLOUR for v in ordered]
    for column, (values, text_format) in enumerate(zip(columns, formats, strict=True), start=1):
        top = max(values) or 1.0
        layout_key = "xaxis" if column == 1 else f"xaxis{column}"
        fig.layout[layout_key].update(range=[0, top * 1.6], showticklabels=False)
        fig.add_trace(go.Bar(y=names, x=values, orientation="h", marker_color=colours, showlegend=False,
                             text=[text_format(value) for value in values], textposition="outside",
                             cliponaxis=False, hoverinfo="y+x", **axes[(1, column)]))
    return lab_frame(fig, view.removeprefix("lab-"), " ".join(title_segments), 380, subplot_title_lines=2, left=130,
                     right=20, bottom=30)


def _microseconds(value: float) -> str:
    """A bound in µs without scientific notation: "12.3", "1,234"."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"
