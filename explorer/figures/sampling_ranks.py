"""Panel (b) of the sampling view: every token of the vocabulary by rank, and where each filter cuts.

The x axis is the rank by raw logit (1 = the most probable token; log scale, 1 .. vocab). Every filter
keeps a head of that ranking (temperature does not reorder; top-k, top-p and min-p keep the most
probable tokens; up to ties), so the survivors of each stage are ranks 1 .. count, where count is the number of
finite logits after the stage, over the full vocabulary. Each filter's cut is a vertical line ("top-p
keeps 32") and the ranks it removed a band in its colour; the curve is the cumulative probability of
the distribution entering top-p (with top-p off: the distribution the filters start from), so the
top-p threshold meets it at top-p's cut. The drawn token (and a preview's draw) sit on the curve at
their rank.

Every number comes from the record's stages; only the curve is sampled (every rank up to 100, then
log-spaced, plus each cut and each marked token's rank) to keep the figure small.
"""

from __future__ import annotations

import numpy as np

from explorer.trace import SamplingRecord, SamplingStage

STAGE_LABELS = {"raw": "raw", "temperature": "temperature", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p"}
STAGE_COLOURS = {"raw": "#999999", "temperature": "#E69F00", "top_k": "#56B4E9", "top_p": "#009E73",
                 "min_p": "#CC79A7"}
FILTERS = ("top_k", "top_p", "min_p")
CURVE_COLOUR = "#999999"
CURVE_HEAD_RANKS = 100  # every rank up to here, then a log-spaced sample up to the vocabulary size
CURVE_TAIL_POINTS = 150
Y_TOP = 1.05


def survivor_counts(record: SamplingRecord) -> list[tuple[str, int]]:
    """(stage name, tokens still allowed after it), per stage in order: its number of finite logits."""
    return [(stage.name, int(stage.kept.sum())) for stage in record.stages]


def raw_order(record: SamplingRecord, count: int) -> np.ndarray:
    """[count] int64: the `count` token ids with the largest raw logits, largest first (ties in id order)."""
    raw = record.stages[0].logits
    count = min(count, len(raw))
    head = np.argpartition(-raw, count - 1)[:count] if count < len(raw) else np.arange(len(raw))
    return head[np.lexsort((head, -raw[head]))]


def token_rank(record: SamplingRecord, token_id: int) -> int:
    """1-based rank of `token_id` by raw logit (ties in id order, as `raw_order`)."""
    raw = record.stages[0].logits
    value = raw[token_id]
    return int((raw > value).sum() + (raw[:token_id] == value).sum()) + 1


def curve_stage(record: SamplingRecord) -> SamplingStage:
    """The distribution whose cumulative curve is drawn: the one entering top-p when top-p is on, else
    the one entering the first filter (after temperature, or the raw softmax)."""
    names = [s.name for s in record.stages]
    if "top_p" in names:
        return record.stages[names.index("top_p") - 1]
    return [s for s in record.stages if s.name not in FILTERS][-1]


def cumulative_curve(probs: np.ndarray, extra_ranks: list[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative probability of `probs` ([vocab] float32, sums to 1) sorted descending: in rank order,
    since no stage reorders the tokens (up to ties).

    Returns:
        (ranks, cumulative): [points] int32 1-based ranks (every rank up to 100, a log-spaced sample
        ending at vocab, and `extra_ranks`) and [points] float32 cumulative probability at each, ending at 1.
    """
    cumulative = np.cumsum(np.sort(probs.astype(np.float64))[::-1])
    cumulative /= cumulative[-1]
    vocab = len(probs)
    head = min(CURVE_HEAD_RANKS, vocab)
    tail = np.geomspace(head, vocab, CURVE_TAIL_POINTS).round()
    extra = np.clip(np.asarray(list(extra_ranks), dtype=np.int64), 1, vocab)
    ranks = np.unique(np.concatenate([np.arange(1, head + 1), tail, extra])).astype(np.int32)
    return ranks, cumulative[ranks - 1].astype(np.float32)


def filter_cuts(record: SamplingRecord) -> list[tuple[str, int, int]]:
    """(filter name, tokens entering it, tokens it keeps) for each active filter, in order."""
    counts = survivor_counts(record)
    return [(name, counts[i - 1][1], kept) for i, (name, kept) in enumerate(counts) if name in FILTERS]


def rank_traces(record: SamplingRecord, marks: list[dict]) -> list[dict]:
    """Panel (b) as scatter trace dicts (go.Scatter properties, no legend).

    Args:
        record: the record drawn (a preview's, or the step's own).
        marks: the tokens to mark on the curve, each {"name", "token_id", "colour", "symbol", "text"}.

    Returns:
        "cumulative probability" (the curve), "kept" (its head, the final survivors), per active
        filter "removed by <filter>" (a band over the ranks it removed, where it removed any) and
        "<filter> keeps <count>" (the cut, at count + 0.5), "top-p = <p>" with top-p on, then one
        marker trace per mark, named by it, customdata [token id].
    """
    vocab = len(record.final.logits)
    cuts = filter_cuts(record)
    ranks_of = {mark["token_id"]: token_rank(record, mark["token_id"]) for mark in marks}
    extra = [c for _, _, kept in cuts for c in (kept, kept + 1)] + list(ranks_of.values())
    ranks, cumulative = cumulative_curve(curve_stage(record).probs, extra)
    final_count = int(record.final.kept.sum())
    head = ranks <= final_count
    line = {"type": "scatter", "mode": "lines", "showlegend": False}
    hover = "rank %{x:,}: cumulative p = %{y:.4f}"
    traces = [
        {**line, "name": "cumulative probability", "x": ranks, "y": cumulative,
         "line": {"color": CURVE_COLOUR, "width": 2}, "hovertemplate": hover + "<extra></extra>"},
        {**line, "name": "kept", "x": ranks[head], "y": cumulative[head],
         "mode": "lines+markers" if final_count <= CURVE_HEAD_RANKS else "lines",
         "line": {"color": STAGE_COLOURS[record.final.name], "width": 3}, "marker": {"size": 5},
         "hovertemplate": hover + f", kept ({final_count:,} survive every stage)<extra></extra>"},
    ]
    for name, entering, kept in cuts:
        label, colour = STAGE_LABELS[name], STAGE_COLOURS[name]
        edge = kept + 0.5
        if kept < entering:
            right = entering + 0.5 if entering < vocab else vocab * 10 ** 0.05  # to the axis' end
            traces.append({**line, "name": f"removed by {label}", "x": [edge, right, right, edge, edge],
                           "y": [0, 0, Y_TOP, Y_TOP, 0], "fill": "toself", "fillcolor": _tint(colour, 0.14),
                           "line": {"width": 0}, "hoveron": "fills",
                           "hovertemplate": f"{label} removed {entering - kept:,} tokens "
                                            f"(ranks {kept + 1:,} to {entering:,})<extra></extra>"})
        traces.append({**line, "name": f"{label} keeps {kept:,}", "x": [edge, edge], "y": [0, Y_TOP],
                       "line": {"color": colour, "width": 2, "dash": "dot"},
                       "hovertemplate": f"{label} keeps {kept:,} of the {entering:,} tokens entering it<extra></extra>"})
    if "top_p" in [name for name, _, _ in cuts]:
        top_p = float(record.settings["top_p"])
        traces.append({**line, "name": f"top-p = {top_p:g}", "x": [1, vocab], "y": [top_p, top_p],
                       "line": {"color": STAGE_COLOURS["top_p"], "dash": "dash", "width": 1.5},
                       "hovertemplate": f"top-p = {top_p:g}<extra></extra>"})
    at = dict(zip(ranks.tolist(), cumulative.tolist(), strict=True))
    for mark in marks:
        rank = ranks_of[mark["token_id"]]
        traces.append({"type": "scatter", "mode": "markers+text", "showlegend": False, "name": mark["name"],
                       "x": [rank], "y": [at[rank]], "customdata": [mark["token_id"]], "text": [mark["text"]],
                       "textposition": "middle right", "textfont": {"size": 12, "color": mark["colour"]},
                       "marker": {"color": mark["colour"], "symbol": mark["symbol"], "size": 13,
                                  "line": {"color": "#FFFFFF", "width": 1}}, "cliponaxis": False,
                       "hovertemplate": f"{mark['text']}: rank {rank:,} by raw logit<extra></extra>"})
    return traces


def rank_annotations(record: SamplingRecord, cell: dict[str, str]) -> list[dict]:
    """Each filter's "<filter> keeps <count>" beside its cut, stacked from the bottom so equal counts
    do not overlap, and the top-p threshold's label at the right end of its line."""
    vocab = len(record.final.logits)
    notes = []
    for index, (name, entering, kept) in enumerate(filter_cuts(record)):
        x = np.log10(kept + 0.5)
        right_side = x < 0.72 * np.log10(vocab)
        text = f"{STAGE_LABELS[name]} keeps {kept:,}" + (" (all)" if kept == entering else "")
        notes.append({"xref": cell["xaxis"], "yref": cell["yaxis"], "x": x, "y": 0.06 + 0.13 * index,
                      "text": text, "showarrow": False, "xanchor": "left" if right_side else "right",
                      "xshift": 4 if right_side else -4, "font": {"size": 12, "color": "#222222"},
                      "bgcolor": "rgba(255,255,255,0.85)", "bordercolor": STAGE_COLOURS[name], "borderpad": 2})
    if "top_p" in [s.name for s in record.stages]:
        top_p = float(record.settings["top_p"])
        notes.append({"xref": cell["xaxis"], "yref": cell["yaxis"], "x": np.log10(vocab), "y": top_p,
                      "text": f"top-p {top_p:g}", "showarrow": False, "xanchor": "right", "yanchor": "bottom",
                      "font": {"size": 12, "color": STAGE_COLOURS["top_p"]}})
    return notes


def rank_axes(record: SamplingRecord) -> tuple[dict, dict]:
    """(x axis, y axis) properties of panel (b)."""
    entering = curve_stage(record)
    what = ("entering top-p" if "top_p" in [s.name for s in record.stages]
            else f"after {STAGE_LABELS[entering.name]}" if entering.name != "raw" else "raw softmax")
    return ({"type": "log", "title": {"text": "rank by raw logit (1 = most probable), log scale"},
             "range": [-0.05, np.log10(len(record.final.logits)) + 0.05]},
            {"title": {"text": f"cumulative p, {what}"}, "range": [0, Y_TOP]})


def survivors_text(record: SamplingRecord) -> str:
    """"151,936 tokens → top-k 50 → top-p 32 → min-p 12": the tokens left after each filter."""
    vocab = len(record.final.logits)
    return " → ".join([f"{vocab:,} tokens"] + [f"{STAGE_LABELS[name]} {kept:,}" for name, _, kept in filter_cuts(record)])


def _tint(colour: str, alpha: float) -> str:
    """"#56B4E9", 0.14 -> "rgba(86,180,233,0.14)"."""
    red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"
