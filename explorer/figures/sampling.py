"""The sampling view: how one step's next token was chosen from the full-vocabulary logits.

Three panels: (a) the top tokens through every stage of the pipeline (raw, temperature, top-k,
top-p, min-p), with the tokens a stage removed marked "×"; (b) every token of the vocabulary by rank,
each filter's cut drawn and its survivors counted, even past the tokens (a) shows
(`explorer.figures.sampling_ranks`); (c) the final distribution over the survivors with the drawn
token highlighted.

A preview (a sampling control moved: other settings applied to the step's stored logits) is drawn from
its own record, titled PREVIEW; the step's real draw, from the step's own record, is named in the title
and marked in every panel. Settings equal to the step's own (`same_sampling`) are no preview: the
step's record itself is drawn.

Every probability comes from the record's stages, which the runner computed over the full
vocabulary with transformers' own logits processors from the step's measured logits; this module
only truncates what it draws.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go

from explorer.figures.sampling_ranks import (
    STAGE_COLOURS,
    STAGE_LABELS,
    filter_cuts,
    rank_annotations,
    rank_axes,
    rank_traces,
    raw_order,
    survivors_text,
)
from explorer.figures.theme import (
    HIGHLIGHT_COLOUR,
    TITLE_LINE_PX,
    base_layout,
    plain_label,
    set_layout,
    subplot_grid,
    visible_piece,
)
from explorer.trace import SamplingRecord

REMOVED_MARK = "×"
SURVIVOR_COLOUR = "#56B4E9"
PREVIEW_COLOUR = "#333333"
LABEL_CHARS = 14
HEIGHT = 620
MIN_SLOTS = 8  # panel (c) is laid out for at least this many bars
STEP_DRAW = "drawn"  # panel (b)'s marker of the step's own token (customdata: its id), preview or not
PREVIEW_DRAW = "preview draw"  # panel (b)'s marker of a preview's draw
# What decides a draw, with each value's neutral default; max_new_tokens does not.
DRAW_SETTINGS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 0}
MEASURED_NOTE = "p computed by transformers' logits processors from this step's measured logits, over all {vocab:,} tokens"


def same_sampling(settings: dict, recorded: dict) -> bool:
    """Whether `settings` (a `SamplingSettings` as a dict) choose the token as the step that recorded
    `recorded` did: both greedy, or both sampling with the same temperature, top-k, top-p, min-p and
    seed. Such a "preview" is the step itself, drawn from its record."""
    if bool(settings.get("do_sample")) != bool(recorded.get("do_sample")):
        return False
    return not settings.get("do_sample") or all(  # int or float as the default is: a seed near 2^63 stays exact
        type(neutral)(settings.get(key, neutral)) == type(neutral)(recorded.get(key, neutral))
        for key, neutral in DRAW_SETTINGS.items())


def sampling_figure(record: SamplingRecord, token_piece: Callable[[int], str], step: int,
                    top_n: int = 20, own: SamplingRecord | None = None) -> go.Figure:
    """The sampling pipeline of one step, each filter's cut over the whole vocabulary, and the draw.

    Args:
        record: the sampling record drawn: the step's own, or (with `own`) a preview's; each stage's
            `logits` is [vocab] float32 with -inf where a filter removed the token.
        token_piece: token id -> its text piece (may contain spaces and newlines).
        step: step index shown (0 = prefill, k = k-th decode step), written to `layout.meta`.
        top_n: tokens drawn in panels (a) and (c): the top `top_n` by raw probability (a) or by final
            probability (c), the step's token (and a preview's draw) always among them (in (c) where
            it survived).
        own: the step's own record when `record` is a preview of other settings on the same logits;
            its token is the one marked "drawn" and named in the title.

    Returns:
        A figure with `layout.meta == {"view": "sampling", "step": step}`. Panel (a) has one bar
        trace per stage, named by the stage ("raw", "top-k", ...), y = probability after the stage
        (float32, 0 and text "×" where removed); panel (b) the traces of `rank_traces` with the marks
        `STEP_DRAW` (the step's token) and, in a preview, `PREVIEW_DRAW`; panel (c) the bar trace
        "final", the step's token's bar in the highlight colour, a preview's draw in `PREVIEW_COLOUR`.

    Raises:
        IndexError: the record has no stages.
    """
    step_token = (own or record).token_id
    drawn = [step_token] if own is None else list(dict.fromkeys([step_token, record.token_id]))
    stage_ids = _with_drawn(raw_order(record, top_n), drawn, top_n)
    final_ids = _with_drawn(_survivors(record, top_n), [t for t in drawn if record.final.kept[t]], top_n)
    labels = token_labels(sorted(set(stage_ids) | set(final_ids)), token_piece)
    layout, cells = subplot_grid(list(_panel_titles(record, top_n, own is not None)), rows=2, cols=2,
                                 vertical_spacing=0.2, specs=[[{"colspan": 2}, None], [{}, {}]],
                                 horizontal_spacing=0.08)
    marks = _marks(record, own)
    data = ([{**trace, **cells[1, 1]} for trace in stage_traces(record, stage_ids, labels)]
            + [{**trace, **cells[2, 1]} for trace in rank_traces(record, marks)]
            + [{**final_trace(record, final_ids, labels, step_token), **cells[2, 2]}])
    x_ranks, y_ranks = rank_axes(record)
    _style_axes(layout, len(final_ids))
    layout["xaxis2"].update(x_ranks)
    layout["yaxis2"].update(y_ranks)
    layout["annotations"] += (_bar_marks(record, labels, marks, cells[1, 1])
                              + rank_annotations(record, cells[2, 1])
                              + _final_marks(record, final_ids, labels, marks, cells[2, 2]))
    layout.update(barmode="group", bargap=0.25, bargroupgap=0.05,
                  legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "top"})
    fig = go.Figure(data=data, layout=layout)
    lines = _title(record, own, token_piece, step)
    base_layout(fig, "sampling", step, "<br>".join(lines), height=HEIGHT)
    # the title's lines from the top, in fractions of the height so presenter mode (text and height
    # 1.5 times) keeps them there; then panel (a)'s title
    title = {**fig.layout.title.to_plotly_json(), "yref": "container", "yanchor": "middle",
             "y": 1 - (TITLE_LINE_PX * len(lines) / 2 + 2) / HEIGHT}
    return set_layout(fig, title=title, margin={"l": 60, "r": 20, "t": 40 + TITLE_LINE_PX * len(lines), "b": 40})


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


def _with_drawn(ranked: np.ndarray, drawn: list[int], top_n: int) -> list[int]:
    """The first `top_n` ids of `ranked`, the `drawn` ids not among them replacing the last others."""
    ids = [int(i) for i in ranked[:top_n]]
    for token_id in [t for t in drawn if t not in ids]:
        others = [j for j, i in enumerate(ids) if i not in drawn]
        if others:
            del ids[others[-1]]
        ids.append(token_id)
    return ids


def _survivors(record: SamplingRecord, top_n: int) -> np.ndarray:
    """The final stage's `top_n` most probable survivors, most probable first (ties in id order)."""
    kept = np.flatnonzero(record.final.kept)
    logits = record.final.logits[kept]
    if len(kept) > top_n:
        head = np.argpartition(-logits, top_n - 1)[:top_n]
        kept, logits = kept[head], logits[head]
    return kept[np.lexsort((kept, -logits))]


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


def final_trace(record: SamplingRecord, token_ids: list[int], labels: dict[int, str], step_token: int) -> dict:
    """Panel (c): final probability of the shown survivors; the step's own token's bar in the highlight
    colour, a preview's draw (`record.token_id` when it is not `step_token`) in `PREVIEW_COLOUR`.

    Returns:
        A bar trace dict (go.Bar properties) "final"; y: [len(token_ids)] float32; customdata: the token ids.
    """
    probs = record.final.probs[token_ids].astype(np.float32)
    colours = [HIGHLIGHT_COLOUR if i == step_token else PREVIEW_COLOUR if i == record.token_id else SURVIVOR_COLOUR
               for i in token_ids]
    return {"type": "bar", "name": "final", "x": [labels[i] for i in token_ids], "y": probs,
            "marker": {"color": colours}, "customdata": token_ids, "showlegend": False,
            "hovertemplate": "%{x} (id %{customdata}): p = %{y:.4f}<extra></extra>"}


def settings_text(settings: dict) -> str:
    """"greedy", or the active filters: "temperature 1.5, top-p 0.9" ("sampling, no filter" when none)."""
    if not settings.get("do_sample"):
        return "greedy"
    parts = [f"{STAGE_LABELS[key]} {settings[key]:g}" for key in ("temperature", "top_k", "top_p", "min_p")
             if key in settings and float(settings[key]) != DRAW_SETTINGS[key]]
    return ", ".join(parts) or "sampling, no filter"


def _greedy(record: SamplingRecord) -> bool:
    return not record.settings.get("do_sample", len(record.stages) > 1)


def _title(record: SamplingRecord, own: SamplingRecord | None, token_piece: Callable[[int], str],
           step: int) -> list[str]:
    """The title's lines: what the figure shows and the token drawn, then where the numbers come from;
    a preview: what it is, what it would do, and what the step itself drew."""
    vocab = len(record.final.logits)
    if own is None:
        token = f"'{plain_label(visible_piece(token_piece(record.token_id)))}' (id {record.token_id}), " \
                f"p = {_p(record.token_prob)}"
        return [f"Step {step}: {_chose(record, token)}", MEASURED_NOTE.format(vocab=vocab)]
    preview = f"{plain_label(repr(token_piece(record.token_id)))} (p = {_p(record.token_prob)})"
    result = (f"greedy takes the argmax, {preview}" if _greedy(record) else
              f"would keep {int(record.final.kept.sum()):,} tokens; a draw with seed {record.settings.get('seed', 0)} "
              f"gives {preview}")
    if not record.final.kept[own.token_id]:
        fate = f"this preview's {STAGE_LABELS[_removed_at(record, own.token_id)]} removes it"
    else:
        fate = f"here p = {_p(float(record.final.probs[own.token_id]))}"
    return [f"PREVIEW (not what the step did): {settings_text(record.settings)} on step {step}'s measured logits",
            result,
            f"In this preview: the step drew {plain_label(repr(token_piece(own.token_id)))} (id {own.token_id}, orange), "
            f"p = {_p(own.token_prob)} ({settings_text(own.settings)}); {fate}"]


def _p(prob: float) -> str:
    """A probability to two decimals, or two significant digits below 0.01 (0.0017, not 0.00)."""
    return f"{prob:.2f}" if prob >= 0.01 or prob == 0 else f"{prob:.2g}"


def _chose(record: SamplingRecord, token: str) -> str:
    """How the step's token was chosen, in words."""
    if _greedy(record):
        return f"greedy: argmax of the raw logits → {token}"
    kept = int(record.final.kept.sum())
    if not filter_cuts(record):
        return f"drawn {token} from all {len(record.final.logits):,} tokens (no filter)"
    return f"drawn {token}, " + ("the only token the filters kept" if kept == 1 else
                                 f"one of the {kept:,} tokens the filters kept")


def _removed_at(record: SamplingRecord, token_id: int) -> str:
    return removed_by(record, [token_id])[0] or record.final.name


def _panel_titles(record: SamplingRecord, top_n: int, preview: bool) -> tuple[str, str, str]:
    vocab = len(record.final.logits)
    steps = " → ".join(STAGE_LABELS[s.name] + _stage_setting(record, s.name) for s in record.stages)
    bars = f"{'Preview: t' if preview else 'T'}op {top_n} of {vocab:,} by raw p" + (
        f" after each stage (× = removed): {steps}" if len(record.stages) > 1 else ", the softmax of the measured logits")
    ranks = (f"{'Preview, e' if preview else 'E'}very token by rank: "
             + ("greedy takes rank 1" if _greedy(record) else survivors_text(record)))
    kept = int(record.final.kept.sum())
    final = "Preview: final p" if preview else "Final distribution"
    if _greedy(record):
        final = f"{'Preview: r' if preview else 'R'}aw softmax (greedy takes the argmax)"
    elif kept == 1:
        final += ": 1 token kept, p = 1"
    elif kept > top_n:
        final += f", top {top_n} of the {kept:,} kept"
    else:
        final += f", all {kept:,} kept, renormalised"
    return bars, ranks, final


def _stage_setting(record: SamplingRecord, name: str) -> str:
    return f" {record.settings[name]:g}" if name in DRAW_SETTINGS and name in record.settings else ""


def _marks(record: SamplingRecord, own: SamplingRecord | None) -> list[dict]:
    """The tokens panel (b) marks: the step's own draw, and a preview's draw where it is another token."""
    if own is None:
        return [{"name": STEP_DRAW, "token_id": record.token_id, "colour": HIGHLIGHT_COLOUR, "symbol": "star",
                 "text": "argmax" if _greedy(record) else "drawn"}]
    marks = [{"name": STEP_DRAW, "token_id": own.token_id, "colour": HIGHLIGHT_COLOUR, "symbol": "star",
              "text": "the step drew" + (" (and so does the preview)" if own.token_id == record.token_id else "")}]
    if own.token_id != record.token_id:
        marks.append({"name": PREVIEW_DRAW, "token_id": record.token_id, "colour": PREVIEW_COLOUR,
                      "symbol": "diamond", "text": "preview argmax" if _greedy(record) else "preview draw"})
    return marks


def _style_axes(layout: dict, bars: int) -> None:
    layout["xaxis"].update(type="category")
    layout["yaxis"].update(title={"text": "p after stage (measured)"}, rangemode="tozero")
    layout["xaxis3"].update(type="category", range=[-0.5, max(bars, MIN_SLOTS) - 0.5])  # one bar stays a bar
    layout["yaxis3"].update(title={"text": "final p (measured)"}, rangemode="tozero")


def _bar_marks(record: SamplingRecord, labels: dict[int, str], marks: list[dict], cell: dict[str, str]) -> list[dict]:
    """Panel (a): an arrow above each marked token's group of bars."""
    notes = []
    for mark in marks:
        token_id = mark["token_id"]
        top = max(float(stage.probs[token_id]) for stage in record.stages)
        notes.append({"xref": cell["xaxis"], "yref": cell["yaxis"], "x": labels[token_id], "y": top,
                      "text": mark["text"], "showarrow": True, "arrowhead": 2, "ay": -22, "yshift": 12,
                      "font": {"size": 12, "color": mark["colour"]}, "arrowcolor": mark["colour"]})
    return notes


def _final_marks(record: SamplingRecord, token_ids: list[int], labels: dict[int, str], marks: list[dict],
                 cell: dict[str, str]) -> list[dict]:
    """Panel (c): an arrow at each marked token that survived, pointing in from the panel's middle."""
    notes = []
    for index, mark in enumerate(marks):
        if mark["token_id"] not in token_ids:
            continue
        left = token_ids.index(mark["token_id"]) < max(len(token_ids), MIN_SLOTS) / 2
        notes.append({"xref": cell["xaxis"], "yref": cell["yaxis"], "x": labels[mark["token_id"]],
                      "y": float(record.final.probs[mark["token_id"]]), "text": mark["text"], "showarrow": True,
                      "arrowhead": 2, "ax": 16 if left else -16, "ay": -28 - 22 * index,
                      "xanchor": "left" if left else "right", "font": {"size": 12, "color": mark["colour"]},
                      "arrowcolor": mark["colour"]})
    return notes
