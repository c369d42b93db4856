"""The "equivalent is not identical" figure: per variant and step, how far the logits moved."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.equivalence import WHY, EquivalenceResult
from explorer.figures.theme import base_layout, plain_label, set_layout, visible_piece, wrapped



def decades(values: np.ndarray) -> tuple[int, int]:
    """The colour scale's ends, in log10: a decade under the smallest non-zero value (where an exact 0
    is drawn, a log scale having no 0) and the decade at or over the largest; (-1, 0) when all are 0."""
    nonzero = values[values > 0]
    if nonzero.size == 0:
        return -1, 0
    low, high = int(np.floor(np.log10(nonzero.min()))) - 1, int(np.ceil(np.log10(nonzero.max())))
    return low, max(high, low + 1)


def equivalence_figure(result: EquivalenceResult, piece: Callable[[int], str]) -> go.Figure:
    """A heatmap: rows the variants that ran, columns the greedy steps, colour log10 of the max |Δlogit|
    against the reference over the decades the values span (`decades`; ticks 1e-5, 1e-4, ...), each cell written with it ("≠" where the variant's greedy token differs);
    a skipped variant is named in the row label with why.

    Returns:
        A figure with `layout.meta == {"view": "equivalence", "step": None}`.
    """
    ran = [c for c in result.comparisons if not c.skipped]
    values = np.array([c.max_abs for c in ran], dtype=np.float64).reshape(len(ran), -1)
    low, high = decades(values)
    z = np.log10(np.maximum(values, 10.0 ** low))  # a colour per decade: 3e-05 is pale where 0.5 is red
    ticks = list(range(low, high + 1))
    text = [[("0" if v == 0 else f"{v:.1e}") + (" ≠" if c.argmax[s] != result.tokens[s] else "")
             for s, v in enumerate(c.max_abs)] for c in ran]
    hover = [[f"{plain_label(c.name)}, step {s}<br>max |Δlogit| {v:.3g}, mean {c.mean_abs[s]:.3g}<br>"
              f"greedy: {plain_label(visible_piece(piece(c.argmax[s]), 16))} "
              f"(reference {plain_label(visible_piece(piece(result.tokens[s]), 16))})"
              for s, v in enumerate(c.max_abs)] for c in ran]
    labels = [f"{plain_label(c.name)}<br>" + ("same greedy tokens" if c.diverged_at is None
                                               else f"greedy differs from step {c.diverged_at}") for c in ran]
    fig = go.Figure(go.Heatmap(z=z, x=[f"step {s}" for s in range(len(result.tokens))], y=labels, text=text,
                               texttemplate="%{text}", customdata=hover, hovertemplate="%{customdata}<extra></extra>",
                               colorscale="Reds", zmin=low, zmax=high, xgap=2, ygap=2,
                               colorbar={"title": {"text": "max |Δ|<br>(log)"}, "thickness": 12, "tickvals": ticks,
                                         "ticktext": ["0"] + [f"1e{k}" for k in ticks[1:]]}))
    skipped = "; ".join(f"{c.name}: skipped ({c.skipped})" for c in result.comparisons if c.skipped)
    title = (f"Equivalent is not identical: max |Δlogit| against the reference ({plain_label(result.reference)}), "
             f"{result.prompt_tokens}-token prompt, {result.wall_ms / 1e3:.1f} s measured")
    base_layout(fig, "equivalence", None, title, height=170 + 60 * len(ran))
    note = WHY + (f"<br>{plain_label(skipped)}" if skipped else "")
    return set_layout(fig, margin={"l": 250, "r": 20, "t": 60, "b": 90}, yaxis={"autorange": "reversed"},
                      annotations=[{"text": "<br>".join(wrapped(note.split(" "), 150)), "showarrow": False, "xref": "paper", "yref": "paper",
                                    "x": 0, "y": -0.12, "xanchor": "left", "yanchor": "top", "align": "left",
                                    "font": {"size": 11}}])
