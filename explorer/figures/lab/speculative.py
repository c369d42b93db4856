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
    si_text,
    subplot_grid,
    visible_piece,
)
from explorer.lab.prefix import shape_text
from explorer.lab.speculative import SpeculativeResult

ACCEPTED_COLOUR = "#009E73"
REJECTED_COLOUR = "#BBBBBB"
MAX_ROUNDS_DRAWN = 16  # rows of the top panel (the default run's rounds all fit); a longer run shows its first
TOKEN_FONT_PX = 11  # a cell's token text, never shrunk (nor turned) to fit its bar


def fig_speculative(result: SpeculativeResult) -> go.Figure:
    """Top: one row per round, a cell per guess (green accepted, grey rejected) and the full model's
    own token (blue), its text inside, the verify pass's input shape and cache n beside it; bottom
    left: ms per token, plain against speculative (measured); bottom right: bytes per token
    (estimated, in the run's dtype).

    Returns:
        A figure with `layout.meta == {"view": "lab-speculative", "step": None}`.
    """
    r = result
    layout, axes = subplot_grid(["", "ms per token (measured)", f"MB per token (estimated, {r.dtype})"],
                                rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]],
                                row_heights=[0.68, 0.32], vertical_spacing=0.14)
    rounds = r.rounds[:MAX_ROUNDS_DRAWN]
    labels = [f"round {i}" for i in range(1, len(rounds) + 1)]
    shown = (f"all {len(r.rounds)} rounds (verify passes)" if len(rounds) == len(r.rounds)
             else f"first {len(rounds)} of {len(r.rounds)} rounds")
    # the draft's guesses 1 to g, then the full model's own token (measured), each in its slot
    layout["xaxis"].update(range=[0, r.guesses + 1 + 3.2], tickvals=[i + 0.47 for i in range(r.guesses + 1)],
                           ticktext=[f"guess {i}" for i in range(1, r.guesses + 1)] + ["full model"], showgrid=False,
                           zeroline=False)
    layout["yaxis"].update(autorange="reversed", categoryorder="array", categoryarray=labels,  # round 1 on top
                           title={"text": shown, "standoff": 4})
    fig = go.Figure(layout=layout)
    kinds = (("accepted guess", ACCEPTED_COLOUR), ("rejected guess", REJECTED_COLOUR),
             ("full model's token", PREFILL_COLOUR))
    for name, colour in kinds:
        # the full model's token in the last slot, also after a last round that guessed fewer
        cells = [(label, r.guesses if i == len(round_.guesses) else i, piece)
                 for label, round_ in zip(labels, rounds, strict=True)
                 for i, piece in enumerate((*round_.guess_pieces, round_.full_piece)) if _kind(round_, i) == name]
        fig.add_trace(go.Bar(y=[c[0] for c in cells], x=[0.94] * len(cells), base=[c[1] for c in cells],
                             orientation="h", name=name, marker_color=colour, showlegend=True,
                             text=[plain_label(visible_piece(c[2], 8)) for c in cells], textposition="inside",
                             insidetextanchor="middle", textangle=0, textfont={"size": TOKEN_FONT_PX},
                             **axes[(1, 1)]))
    notes = [f"input {shape_text(x.verify_input_shape)}, n = {x.context}" for x in rounds]
    fig.add_trace(go.Scatter(y=labels, x=[r.guesses + 1.1] * len(rounds), mode="text", text=notes,
                             textposition="middle right", showlegend=False, hoverinfo="skip", **axes[(1, 1)]))
    ways = ["plain", f"speculative<br>k={r.depth}, g={r.guesses}"]
    for cell, values, texts in (
            ((2, 1), [r.ms_per_token(False), r.ms_per_token(True)],
             [f"{r.ms_per_token(False):.3g} ms", f"{r.ms_per_token(True):.3g} ms"]),
            ((2, 2), [r.bytes_per_token(False) / 1e6, r.bytes_per_token(True) / 1e6],
             [si_text(r.bytes_per_token(False), "B"), si_text(r.bytes_per_token(True), "B")])):
        fig.add_trace(go.Bar(x=ways, y=values, marker_color=[DECODE_COLOUR, ACCEPTED_COLOUR], showlegend=False,
                             text=texts, textposition="outside", cliponaxis=False, **axes[cell]))
        # room above the taller bar for its label
        layout_axis = "yaxis2" if cell == (2, 1) else "yaxis3"
        fig.layout[layout_axis].range = [0, 1.3 * max(max(values), 1e-9)]
    title = (f"Self-speculative decoding: the first {r.depth} of {r.layers} layers guess, the full model verifies "
             f"up to {r.guesses} at once<br>{r.speed_text()} (measured, {r.ms_per_token(True):.1f} against "
             f"{r.ms_per_token(False):.1f} ms a token); acceptance {r.acceptance_rate:.0%} per guess, first guess "
             f"accepted in {r.first_guess_rate:.0%} of rounds; tokens "
             f"{'identical to' if r.same_tokens else 'DIFFERENT from'} plain greedy decoding")
    lab_frame(fig, "speculative", title, 560, legend=True, subplot_title_lines=0)
    return set_layout(fig, barmode="overlay", bargap=0.1,
                      uniformtext={"minsize": TOKEN_FONT_PX, "mode": "show"})


def _kind(round_, index: int) -> str:
    """Which kind of cell the round's `index`-th token is: a guess kept or rejected, or the full model's."""
    if index == len(round_.guesses):
        return "full model's token"
    return "accepted guess" if index < round_.accepted else "rejected guess"
