"""The "equivalent is not identical" figure: per variant and step, how far the logits moved."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go

from explorer.analysis.equivalence import WHY, EquivalenceResult
from explorer.figures.theme import base_layout, plain_label, set_layout, visible_piece, wrapped

FLOOR = 1e-12  # an exact 0 is drawn at this (a log scale has no 0); its text says 0


def equivalence_figure(result: EquivalenceResult, piece: Callable[[int], str]) -> go.Figure:
    """A heatmap: rows the variants that ran, columns the greedy steps, colour log10 of the max |Δlogit|
    against the reference, each cell written with it ("≠" where the variant's greedy token differs);
    a skipped variant is named in the row label with why.

    Returns:
        A figure with `layout.meta == {"view": "equivalence", "step": None}`.
    """
    ran = [c for c in result.comparisons if not c.skipped]
    z = np.log10(np.maximum(np.array([c.max_abs for c in ran], dtype=np.float64), FLOOR))
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
                               colorscale="Reds", zmin=np.log10(FLOOR), zmax=max(0.0, float(z.max(initial=0))),
                               xgap=2, ygap=2, colorbar={"title": {"text": "log10<br>max |Δ|"}, "thickness": 12}))
    skipped = "; ".join(f"{c.name}: skipped ({c.skipped})" for c in result.comparisons if c.skipped)
    title = (f"Equivalent is not identical: max |Δlogit| against the reference ({plain_label(result.reference)}), "
             f"{result.prompt_tokens}-token prompt, {result.wall_ms / 1e3:.1f} s measured")
    base_layout(fig, "equivalence", None, title, height=170 + 60 * len(ran))
    note = WHY + (f"<br>{plain_label(skipped)}" if skipped else "")
    return set_layout(fig, margin={"l": 250, "r": 20, "t": 60, "b": 90}, yaxis={"autorange": "reversed"},
                      annotations=[{"text": "<br>".join(wrapped(note.split(" "), 150)), "showarrow": False, "xref": "paper", "yref": "paper",
                                    "x": 0, "y": -0.12, "xanchor": "left", "yanchor": "top", "align": "left",
                                    "font": {"size": 11}}])
