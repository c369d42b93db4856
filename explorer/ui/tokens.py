"""The token strip: the prompt's tokens and the generated ones as chips (piece and id), in HTML."""

from __future__ import annotations

import html

from explorer.figures.theme import visible_piece
from explorer.journey import step_label
from explorer.trace import StepTrace

# A chip per token up to this many; past it the strip keeps the first and last tokens (the page
# stays light for a 2,048-token prompt).
MAX_CHIPS = 400


def token_strip_html(traces: list[StepTrace], step: int, next_piece: str | None) -> str:
    """Chips for every token fed to the model so far, then the token the last step chose.

    Args:
        traces: the session's traces (prefill first).
        step: the step shown; the tokens it fed are outlined.
        next_piece: the piece of the token the last step chose (not yet fed), or None.
    """
    chips = []
    for trace in traces:
        kind = "prompt" if trace.stage == "prefill" else "generated"
        shown = " shown" if trace.step_index == step else ""
        for token_id, piece in zip(trace.input_ids, trace.input_pieces, strict=True):
            chips.append(_chip(piece, token_id, kind + shown, f"{kind} token, fed at {step_label(trace)}"))
    if len(chips) > MAX_CHIPS:
        hidden = len(chips) - MAX_CHIPS
        chips = chips[: MAX_CHIPS // 4] + [f'<span class="tok-gap">… {hidden} tokens …</span>'] + \
            chips[-(MAX_CHIPS - MAX_CHIPS // 4):]
    if next_piece is not None and traces and traces[-1].sampling is not None:
        last = traces[-1]
        chips.append(_chip(next_piece, last.sampling.token_id, "next", f"chosen by {step_label(last)}, not yet fed"))
    return '<div class="token-strip">' + "".join(chips) + "</div>"


def _chip(piece: str, token_id: int, css: str, title: str) -> str:
    # the id is escaped too: a saved run is checked to hold whole-number ids, but this HTML must be
    # safe whatever it is given (an id such as '"><img src=x onerror=...>' once ran its script here)
    shown_id = html.escape(str(token_id))
    return (f'<span class="tok {css}" title="id {shown_id} · {html.escape(title)}">'
            f'<span class="piece">{html.escape(visible_piece(piece))}</span><sub>{shown_id}</sub></span>')

