"""What every figure shares: fonts, colours per operator kind, and the `layout.meta` marker.

Pure plotly (no torch, no gradio). Every view calls `base_layout`, so a figure always carries
`layout.meta = {"view": ..., "step": ...}`: UI tests wait on it to know a figure was redrawn.
"""

from __future__ import annotations

import plotly.graph_objects as go

FONT_FAMILY = "Inter, Helvetica, Arial, sans-serif"
FONT_SIZE = 13
TEMPLATE = "plotly_white"

# One colour per operator kind (colour-blind-safe Okabe-Ito palette, plus greys for data movement).
KIND_COLOURS = {
    "tokenize": "#999999",
    "gather": "#999999",
    "norm": "#56B4E9",
    "gemm": "#0072B2",
    "batched_gemm": "#009E73",
    "softmax": "#E69F00",
    "rope": "#CC79A7",
    "reshape": "#BBBBBB",
    "cache_write": "#D55E00",
    "broadcast": "#BBBBBB",
    "elementwise": "#F0E442",
    "sample": "#000000",
    "detokenize": "#999999",
}
PREFILL_COLOUR = "#0072B2"
DECODE_COLOUR = "#D55E00"
HIGHLIGHT_COLOUR = "#D55E00"


VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def visible_piece(piece: str, max_chars: int | None = None) -> str:
    """A token piece with its whitespace visible ("␣" space, "↵" newline, "⇥" tab, "␍" return), "∅"
    when empty, cut to `max_chars` characters with "…" when given."""
    text = piece.translate(VISIBLE_WHITESPACE) or "∅"
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: max_chars - 1] + "…"


def kind_colour(kind: str) -> str:
    """The colour of an operator kind; grey for a kind not listed."""
    return KIND_COLOURS.get(kind, "#777777")


def base_layout(fig: go.Figure, view: str, step: int | None, title: str, height: int = 520) -> go.Figure:
    """Apply the shared look and the `layout.meta` marker to `fig`, in place, and return it.

    Args:
        fig: the figure to style.
        view: "journey", "attention", "kv_cache", "sampling" or "roofline".
        step: the step index the figure shows (0 = prefill, k = k-th decode step); None when empty.
        title: the figure's title (kept short: one line).
        height: figure height in pixels.
    """
    fig.update_layout(
        template=TEMPLATE,
        title={"text": title, "x": 0.01, "xanchor": "left"},
        font={"family": FONT_FAMILY, "size": FONT_SIZE},
        height=height,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        meta={"view": view, "step": step},
        hoverlabel={"font": {"family": "monospace", "size": FONT_SIZE}},
    )
    return fig


def empty_figure(view: str, message: str) -> go.Figure:
    """A figure with no data and `message` in its middle (before the first prefill, or on a step
    that has nothing to show in this view)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"size": FONT_SIZE + 3})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return base_layout(fig, view, None, "", height=300)
