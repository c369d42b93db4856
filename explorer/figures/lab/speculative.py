"""Speculative decoding's figure: each round's guesses (accepted or rejected) and the full model's own
token, then the time per token (measured) and bytes per token (estimated) of the two ways."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.theme import (
    DECODE_COLOUR,
    PREFILL_COLOUR,
    plain_label,
    set_layout,
    subplot_grid,
    visible_piece,
)
from explorer.lab.prefix import shape_text
from explorer.lab.speculative import SpeculativeResult

ACCEPTED_COLOUR = "#009E73"
REJECTED_COLOUR = "#BBBBBB"
MAX_ROUNDS_DRAWN = 12  # rows of the top panel; a longer run shows its first rounds


def fig_speculative(result: SpeculativeResult) -> go.Figure:
    """Top: one row per round, a cell per guess (green accepted, grey rejected) and the full model's
    own token (blue), its text inside, the verify pass's input shape and cache n beside it; bottom
    left: ms per token, plain against speculative (measured); bottom right: bytes per token (estimated).

    Returns:
        A figure with `layout.meta == {"view": "lab-speculative", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(["", "ms per token (measured)", "MB per token (estimated)"],
                                rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]],
                                row_heights=[0.62, 0.38], vertical_spacing=0.16)
    rounds = r.rounds[:MAX_ROUNDS_DRAWN]
    labels = [f"round {i}" for i in range(1, len(rounds) + 1)]
    layout["xaxis"].update(title={"text": "each round's guesses by the draft, then the full model's own token (measured)"}, range=[0, r.guesses + 1 + 4.5], dtick=1)
    layout["yaxis"].update(autorange="reversed", categoryorder="array", categoryarray=labels)  # round 1 on top
    layout["yaxis2"].update(rangemode="tozero")
    layout["yaxis3"].update(rangemode="tozero")
    fig = go.Figure(layout=layout)
    kinds = (("accepted guess", ACCEPTED_COLOUR), ("rejected guess", REJECTED_COLOUR),
             ("full model's token", PREFILL_COLOUR))
    for name, colour in kinds:
        cells = [(label, i, piece) for label, round_ in zip(labels, rounds, strict=True)
                 for i, piece in enumerate((*round_.guess_pieces, round_.full_piece))
                 if _kind(round_, i) == name]
        fig.add_trace(go.Bar(y=[c[0] for c in cells], x=[0.94] * len(cells), base=[c[1] for c in cells],
                             orientation="h", name=name, marker_color=colour, showlegend=True,
                             text=[plain_label(visible_piece(c[2], 8)) for c in cells], textposition="inside",
                             insidetextanchor="middle", **axes[(1, 1)]))
    notes = [f"input {shape_text(x.verify_input_shape)}, n = {x.context}" for x in rounds]
    fig.add_trace(go.Scatter(y=labels, x=[r.guesses + 1.1] * len(rounds), mode="text", text=notes,
                             textposition="middle right", showlegend=False, hoverinfo="skip", **axes[(1, 1)]))
    ways = ["plain", f"speculative<br>k={r.depth}, g={r.guesses}"]
    for cell, values, digits in (((2, 1), [r.ms_per_token(False), r.ms_per_token(True)], ".3g"),
                                 ((2, 2), [r.bytes_per_token(False) / 1e6, r.bytes_per_token(True) / 1e6], ".3g")):
        fig.add_trace(go.Bar(x=ways, y=values, marker_color=[DECODE_COLOUR, ACCEPTED_COLOUR], showlegend=False,
                             text=[f"{value:{digits}}" for value in values], textposition="outside", **axes[cell]))
    title = (f"Self-speculative decoding: the first {r.depth} of {r.layers} layers guess, the full model verifies "
             f"{r.guesses} at once<br>acceptance {r.acceptance_rate:.0%}, {r.speed_up:.2f}x time per token "
             f"(measured); tokens {'identical to' if r.same_tokens else 'DIFFERENT from'} plain greedy decoding")
    lab_frame(fig, "speculative", title, 560, legend=True, subplot_title_lines=0)
    return set_layout(fig, barmode="overlay", bargap=0.15)


def _kind(round_, index: int) -> str:
    """Which kind of cell the round's `index`-th token is: a guess kept or rejected, or the full model's."""
    if index == len(round_.guesses):
        return "full model's token"
    return "accepted guess" if index < round_.accepted else "rejected guess"
