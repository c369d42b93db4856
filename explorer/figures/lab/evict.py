"""KV eviction's figure: each rule's running perplexity along the text with W marked, and, beneath, the
positions each rule's cache holds after the pass a slider chooses."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.lab.frame import lab_frame
from explorer.figures.theme import subplot_grid
from explorer.lab.evict import FULL, OWN_PROMPT, EvictResult, running_perplexity

COLOURS = {FULL: "#000000", "window": "#D55E00", "sinks": "#0072B2", "h2o": "#009E73"}
SLIDER_STOPS = 48  # the passes the slider offers at most, evenly spaced, the last always among them
SLIDER_PX = 70  # the slider's band under the x axis

# each position rule as the title names it (`explorer.lab.evict.POSITION_TEXT` says it in full)
POSITION_NAMES = {"as-cached": "positions as cached (the original text's)",
                  "renumbered": "positions renumbered inside the cache (StreamingLLM)"}


def fig_evict(result: EvictResult) -> go.Figure:
    """Top: the running perplexity exp(mean NLL of predictions 1..k) against position k, one line per cache
    (measured), a dashed line at W. Bottom: a strip per rule, a mark at each position its cache holds after
    the pass the slider below chooses (the last at first; measured); the sinks' first S shaded; above it, how much attention the first tokens
    draw with the full cache, as the attention view measures sinks. Title: the text decoded, and the
    perplexity past W with and without sinks.

    Returns:
        A figure with `layout.meta == {"view": "lab-evict", "step": None}`.
    """
    r, w, m = result, result.window, result.sink_measures
    titles = ["running perplexity of the text (measured; log scale)",
              f"positions the cache holds after the pass chosen below (measured)<br>with the full cache, the first token is "
              f"a sink in {m.head_share:.0%} of heads; the first {r.sinks} draw {m.first_share:.0%} of the attention"]
    layout, axes = subplot_grid(titles, rows=2, cols=1, row_heights=[0.68, 0.32], vertical_spacing=0.16,
                                shared_xaxes=True)
    layout["yaxis"].update(type="log", title={"text": "perplexity"})
    layout["xaxis2"].update(title={"text": "position in the text (tokens)"}, range=[-1, r.text_tokens])
    rules = [run.name for run in r.runs[1:]]
    layout["yaxis2"].update(categoryorder="array", categoryarray=rules[::-1], autorange=True)
    fig = go.Figure(layout=layout)
    for run in r.runs:
        fig.add_trace(go.Scatter(x=np.arange(1, len(run.nll) + 1), y=running_perplexity(np.array(run.nll)),
                                 mode="lines", name=f"{run.name}: {run.perplexity(w):.2f} past W",
                                 line={"color": COLOURS[run.name], "width": 2.5 if run.name == FULL else 2},
                                 hovertemplate="position %{x}<br>perplexity %{y:.2f}", **axes[(1, 1)]))
        if run.name != FULL:
            fig.add_trace(go.Scatter(x=list(run.kept), y=[run.name] * len(run.kept), mode="markers",
                                     marker={"symbol": "line-ns-open", "size": 14, "color": COLOURS[run.name]},
                                     showlegend=False, hovertemplate="position %{x}", **axes[(2, 1)]))
    for row in (1, 2):  # the grid is a plain layout (`subplot_grid`): shapes name their axes
        x, y = axes[(row, 1)]["xaxis"], axes[(row, 1)]["yaxis"]
        fig.add_shape(type="line", x0=w, x1=w, y0=0, y1=1, xref=x, yref=f"{y} domain",
                      line={"dash": "dash", "color": "#555555", "width": 1})
    fig.add_annotation(x=w, y=1, yref="y domain", text=f" W = {w}: eviction starts", showarrow=False,
                       xanchor="left", yanchor="top", font={"size": 12})
    if r.sinks:
        fig.add_shape(type="rect", x0=-0.5, x1=r.sinks - 0.5, y0=0, y1=1, xref="x2", yref="y2 domain",
                      fillcolor="#0072B2", opacity=0.12, line_width=0)
    window, sinks = r.run("window"), r.run("sinks")
    text = "your prompt" if r.source == OWN_PROMPT else "the shipped text"
    title = (f"KV eviction over {text}, cache of W = {w} of {r.text_tokens} positions ({r.bytes_per_position * w / 1e6:.2f} "
             f"MB, computed): past W, perplexity {window.perplexity(w):.2f} with the recent {w} alone, "
             f"{sinks.perplexity(w):.2f} with the first {r.sinks} kept as sinks, {r.run(FULL).perplexity(w):.2f} "
             f"with the full cache (measured); {POSITION_NAMES[r.positions]}")
    fig.update_layout(sliders=[_pass_slider(r, [i for i, trace in enumerate(fig.data) if trace.mode == "markers"])])
    return lab_frame(fig, "evict", title, 490 + SLIDER_PX, legend=True, left=80, right=20, bottom=50 + SLIDER_PX)


def _pass_slider(result: EvictResult, strips: list[int]) -> dict:
    """A slider over the decode's passes (at most `SLIDER_STOPS`, the last one chosen): each stop redraws
    the rules' strips (traces `strips`) with the positions their caches held after that pass."""
    rules = result.runs[1:]
    passes = len(rules[0].kept_steps)
    count = min(passes, SLIDER_STOPS)
    stops = sorted({round(i * (passes - 1) / max(1, count - 1)) for i in range(count)})
    first_fed = result.prefill_tokens - 1  # the last position the prefill fed; each later pass feeds one more
    steps = [{"method": "restyle", "label": str(first_fed + stop),
              "args": [{"x": [list(run.kept_steps[stop]) for run in rules]}, strips]} for stop in stops]
    return {"active": len(steps) - 1, "steps": steps, "pad": {"t": 45}, "len": 1.0, "x": 0, "xanchor": "left",
            "currentvalue": {"prefix": "after feeding position ", "font": {"size": 12}}, "font": {"size": 11}}
