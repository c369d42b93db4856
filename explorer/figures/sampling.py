"""The sampling view: how one step's next token was chosen from the full-vocabulary logits.

Three panels: (a) the top tokens through every stage of the pipeline (raw, temperature, top-k,
top-p, min-p), with the tokens a stage removed marked "×"; (b) the cumulative probability of the
distribution that enters top-p, sorted, with the top-p threshold and the kept/removed boundary;
(c) the final distribution over the survivors with the drawn token highlighted.

Every probability comes from the record's stages, which the runner computed over the full
vocabulary with transformers' own logits processors; this module only truncates what it draws.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go

from explorer.figures.theme import HIGHLIGHT_COLOUR, base_layout, plain_label, set_layout, subplot_grid, visible_piece
from explorer.trace import SamplingRecord, SamplingStage

STAGE_LABELS = {"raw": "raw", "temperature": "temperature", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p"}
STAGE_COLOURS = {"raw": "#999999", "temperature": "#E69F00", "top_k": "#56B4E9", "top_p": "#009E73",
                 "min_p": "#CC79A7"}
REMOVED_MARK = "×"
SURVIVOR_COLOUR = "#56B4E9"
CURVE_COLOUR = "#999999"
LABEL_CHARS = 14
CURVE_HEAD_RANKS = 100  # every rank up to here, then a log-spaced sample up to the vocabulary size
CURVE_TAIL_POINTS = 150


def sampling_figure(record: SamplingRecord, token_piece: Callable[[int], str], step: int,
                    top_n: int = 20) -> go.Figure:
    """The sampling pipeline of one step, its top-p cut and the draw.

    Args:
        record: the step's sampling record; each stage's `logits` is [vocab] float32 with -inf where
            a filter removed the token.
        token_piece: token id -> its text piece (may contain spaces and newlines).
        step: step index shown (0 = prefill, k = k-th decode step), written to `layout.meta`.
        top_n: tokens drawn in panels (a) and (c): the top `top_n` by raw probability (a) or by final
            probability (c), the drawn token always among them.

    Returns:
        A figure with `layout.meta == {"view": "sampling", "step": step}`. Panel (a) has one bar
        trace per stage, named by the stage ("raw", "top-k", ...), y = probability after the stage
        (float32, 0 and text "×" where removed); panel (b) the traces "cumulative probability",
        "kept by <filter>", "kept/removed boundary" and, with top-p on, "top-p = <p>"; panel (c) the
        bar trace "final", the drawn token's bar in the highlight colour.

    Raises:
        IndexError: the record has no stages.
    """
    final_ids = _final_ids(record, top_n)
    stage_ids = _stage_ids(record, top_n)
    labels = token_labels(sorted(set(stage_ids) | set(final_ids)), token_piece)
    layout, cells = subplot_grid(list(_panel_titles(record, top_n)), rows=2, cols=2, vertical_spacing=0.2,
                                 specs=[[{"colspan": 2}, None], [{}, {}]], horizontal_spacing=0.08)
    data = ([{**trace, **cells[1, 1]} for trace in stage_traces(record, stage_ids, labels)]
            + [{**trace, **cells[2, 1]} for trace in cumulative_traces(record)]
            + [{**final_trace(record, final_ids, labels), **cells[2, 2]}])
    _style_axes(layout, len(record.final.logits))
    layout["annotations"] += _annotations(record, labels, cells[2, 1], cells[2, 2])
    layout.update(barmode="group", bargap=0.25, bargroupgap=0.05,
                  legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "top"})
    fig = go.Figure(data=data, layout=layout)
    base_layout(fig, "sampling", step, f"Sampling, step {step}: {_draw_summary(record, token_piece)}", height=620)
    return set_layout(fig, margin={"l": 60, "r": 20, "t": 115, "b": 40})


def token_labels(token_ids: list[int], token_piece: Callable[[int], str]) -> dict[int, str]:
    """Token id -> short visible label, unique: pieces shown the same get " (id)" appended; escaped
    for Plotly (`plain_label`), which shows it as a category, in the ticks and the hover."""
    shown = {}
    for token_id in token_ids:
        shown[token_id] = plain_label(visible_piece(token_piece(token_id), LABEL_CHARS))
    counts: dict[str, int] = {}
    for label in shown.values():
        counts[label] = counts.get(label, 0) + 1
    return {i: f"{label} ({i})" if counts[label] > 1 else label for i, label in shown.items()}


def removed_by(record: SamplingRecord, token_ids: list[int]) -> list[str | None]:
    """Per token, the name of the first stage that removed it, None if it survived every stage."""
    kept = np.stack([stage.kept[token_ids] for stage in record.stages])  # [stages, tokens]
    return [None if kept[:, j].all() else record.stages[int(np.argmin(kept[:, j]))].name
            for j in range(len(token_ids))]


def _with_drawn(ranked: np.ndarray, drawn: int, top_n: int) -> list[int]:
    """The first `top_n` ids of `ranked`, the drawn id replacing the last one if it is not among them."""
    ids = [int(i) for i in ranked[:top_n]]
    if drawn not in ids:
        ids = ids[: top_n - 1] + [drawn]
    return ids


def _stage_ids(record: SamplingRecord, top_n: int) -> list[int]:
    raw = record.stages[0].probs
    return _with_drawn(np.argsort(-raw, kind="stable"), record.token_id, top_n)


def _final_ids(record: SamplingRecord, top_n: int) -> list[int]:
    probs = record.final.probs
    ranked = np.argsort(-probs, kind="stable")
    survivors = ranked[: int(record.final.kept.sum())]
    return _with_drawn(survivors, record.token_id, top_n)


def stage_traces(record: SamplingRecord, token_ids: list[int], labels: dict[int, str]) -> list[dict]:
    """One bar trace per stage: the probability of each shown token after that stage.

    Returns:
        Bar trace dicts (go.Bar properties) named by stage label; y: [len(token_ids)] float32 probability (0 where removed), text "×"
        where the token was removed by this stage or an earlier one.
    """
    x = [labels[i] for i in token_ids]
    firsts = removed_by(record, token_ids)
    traces = []
    for index, stage in enumerate(record.stages):
        probs = stage.probs[token_ids].astype(np.float32)
        kept = stage.kept[token_ids]
        earlier = {s.name for s in record.stages[: index + 1]}
        hover = [
            f"{x[j]} (id {token_ids[j]})<br>after {STAGE_LABELS[stage.name]}: p = {probs[j]:.4f}" if kept[j]
            else f"{x[j]} (id {token_ids[j]})<br>removed by {STAGE_LABELS[firsts[j]]}"
            for j in range(len(token_ids))
        ]
        traces.append({
            "type": "bar", "name": STAGE_LABELS[stage.name], "x": x, "y": probs,
            "marker": {"color": STAGE_COLOURS[stage.name]},
            "text": [REMOVED_MARK if firsts[j] in earlier else "" for j in range(len(token_ids))],
            "textposition": "outside", "textfont": {"color": "#555555", "size": 12}, "cliponaxis": False,
            "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>", "customdata": token_ids,
        })
    return traces


def cut_stage(record: SamplingRecord) -> tuple[SamplingStage, SamplingStage]:
    """(distribution entering top-p, the stage whose kept set splits the curve).

    With top-p on: the stage before "top_p" and "top_p"; off: the final stage twice.
    """
    names = [s.name for s in record.stages]
    if "top_p" in names:
        index = names.index("top_p")
        return record.stages[index - 1], record.stages[index]
    return record.final, record.final


def cumulative_curve(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative probability of `probs` ([vocab] float32, sums to 1) sorted descending.

    Returns:
        (ranks, cumulative): [points] int32 1-based ranks (every rank up to 100, then a log-spaced
        sample ending at vocab) and [points] float32 cumulative probability at each, ending at 1.
    """
    cumulative = np.cumsum(np.sort(probs.astype(np.float64))[::-1])
    cumulative /= cumulative[-1]
    vocab = len(probs)
    tail = np.geomspace(min(CURVE_HEAD_RANKS, vocab), vocab, CURVE_TAIL_POINTS).round()
    ranks = np.unique(np.concatenate([np.arange(1, min(CURVE_HEAD_RANKS, vocab) + 1), tail])).astype(np.int32)
    return ranks, cumulative[ranks - 1].astype(np.float32)


def cumulative_traces(record: SamplingRecord) -> list[dict]:
    """Panel (b) as scatter trace dicts (go.Scatter properties, no legend): the sorted cumulative
    curve, its kept head, the kept/removed boundary, and the top-p threshold when top-p is on."""
    entering, cut = cut_stage(record)
    ranks, cumulative = cumulative_curve(entering.probs)
    kept_count = int(cut.kept.sum())
    head = ranks <= kept_count
    cut_label = STAGE_LABELS[cut.name] if cut.name != "raw" else "greedy (no filter)"
    hover = "rank %{x}: cumulative p = %{y:.4f}"
    line = {"type": "scatter", "mode": "lines", "showlegend": False}
    traces = [
        {**line, "name": "cumulative probability", "x": ranks, "y": cumulative,
         "line": {"color": CURVE_COLOUR, "width": 2}, "hovertemplate": hover + "<extra></extra>"},
        {**line, "name": f"kept by {cut_label}", "x": ranks[head], "y": cumulative[head], "mode": "lines+markers",
         "line": {"color": STAGE_COLOURS[cut.name], "width": 3}, "marker": {"size": 5},
         "hovertemplate": hover + f", kept by {cut_label}<extra></extra>"},
    ]
    if kept_count < len(cut.logits):
        traces.append({**line, "name": "kept/removed boundary", "x": np.array([kept_count, kept_count], np.int32),
                       "y": np.array([0, 1], np.float32), "line": {"color": "#555555", "dash": "dot", "width": 1},
                       "hovertemplate": f"{kept_count:,} kept by {cut_label}<extra></extra>"})
    if cut.name == "top_p":
        top_p = float(record.settings["top_p"])
        traces.append({**line, "name": f"top-p = {top_p:g}", "x": np.array([1, len(entering.logits)], np.int32),
                       "y": np.array([top_p, top_p], np.float32),
                       "line": {"color": STAGE_COLOURS["top_p"], "dash": "dash", "width": 1.5},
                       "hovertemplate": f"top-p = {top_p:g}<extra></extra>"})
    return traces


def final_trace(record: SamplingRecord, token_ids: list[int], labels: dict[int, str]) -> dict:
    """Panel (c): final probability of the shown survivors; the drawn token's bar in the highlight colour.

    Returns:
        A bar trace dict (go.Bar properties) "final"; y: [len(token_ids)] float32; customdata: the token ids.
    """
    probs = record.final.probs[token_ids].astype(np.float32)
    colours = [HIGHLIGHT_COLOUR if i == record.token_id else SURVIVOR_COLOUR for i in token_ids]
    return {"type": "bar", "name": "final", "x": [labels[i] for i in token_ids], "y": probs,
            "marker": {"color": colours}, "customdata": token_ids, "showlegend": False,
            "hovertemplate": "%{x} (id %{customdata}): p = %{y:.4f}<extra></extra>"}


def _panel_titles(record: SamplingRecord, top_n: int) -> tuple[str, str, str]:
    steps = " → ".join(_stage_setting(record, s.name) for s in record.stages)
    entering, cut = cut_stage(record)
    curve = (f"Cumulative probability entering top-p (after {STAGE_LABELS[entering.name]}), sorted"
             if cut.name == "top_p" else "Cumulative probability of the final distribution, sorted (top-p off)")
    vocab = len(record.final.logits)
    kept = int(record.final.kept.sum())
    final = (f"Final distribution: kept {kept:,} of {vocab:,}, renormalised" if len(record.stages) > 1
             else f"Raw softmax over {vocab:,} tokens (greedy takes the argmax)")
    return f"Top {top_n} tokens by raw probability through each stage<br>{steps} (× = removed)", curve, final


def _stage_setting(record: SamplingRecord, name: str) -> str:
    settings = record.settings
    value = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p"}.get(name)
    return STAGE_LABELS[name] + (f" {settings[value]:g}" if value in settings else "")


def _draw_summary(record: SamplingRecord, token_piece: Callable[[int], str]) -> str:
    piece = plain_label(visible_piece(token_piece(record.token_id)))
    token = f"'{piece}' (id {record.token_id}), p = {record.token_prob:.2f}"
    if not record.settings.get("do_sample", len(record.stages) > 1):
        return f"greedy: argmax of the raw logits → {token}"
    kept = int(record.final.kept.sum())
    return f"drawn {token} · kept {kept:,} of {len(record.final.logits):,}"


def _style_axes(layout: dict, vocab: int) -> None:
    layout["xaxis"].update(type="category")
    layout["yaxis"].update(title={"text": "probability after stage"}, rangemode="tozero")
    layout["xaxis2"].update(type="log", title={"text": "rank (tokens sorted by probability)"},
                            range=[-0.05, np.log10(vocab) + 0.05])
    layout["yaxis2"].update(title={"text": "cumulative probability"}, range=[0, 1.05])
    layout["xaxis3"].update(type="category")
    layout["yaxis3"].update(title={"text": "final probability"}, rangemode="tozero")


def _annotations(record: SamplingRecord, labels: dict[int, str], curve_cell: dict[str, str],
                 final_cell: dict[str, str]) -> list[dict]:
    """Label the boundary and the top-p line in (b), and point at the drawn token in (c)."""
    _, cut = cut_stage(record)
    kept_count = int(cut.kept.sum())
    curve = {"xref": curve_cell["xaxis"], "yref": curve_cell["yaxis"], "showarrow": False, "font": {"size": 12}}
    notes = []
    if kept_count < len(cut.logits):
        notes.append({**curve, "x": np.log10(kept_count), "y": 0.08, "text": f"kept {kept_count:,}",
                      "xanchor": "left", "xshift": 4})
    if cut.name == "top_p":
        notes.append({**curve, "x": np.log10(len(cut.logits)), "y": float(record.settings["top_p"]),
                      "text": f"top-p {record.settings['top_p']:g}", "xanchor": "right", "yanchor": "top"})
    drawn_p = float(record.final.probs[record.token_id])
    notes.append({"xref": final_cell["xaxis"], "yref": final_cell["yaxis"], "x": labels[record.token_id],
                  "y": drawn_p, "text": "drawn" if len(record.stages) > 1 else "argmax", "showarrow": True,
                  "arrowhead": 2, "ay": -28, "font": {"size": 12, "color": HIGHLIGHT_COLOUR}})
    return notes
