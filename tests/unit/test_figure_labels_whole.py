"""Labels drawn whole and apart, from the figures' JSON (tests/e2e/test_figure_labels_browser.py checks
the boxes Chromium draws): the per-head shapes of split heads and RoPE in the forward diagram and the
journey table, every stop framed, the roofline's sweep labels and legend, and titles clear of the
modebar (at most `CLEAR_OF_MODEBAR_CHARS` a line, the presenter's 1.5x fewer)."""

from __future__ import annotations

import pytest

from explorer.figures.forward_layout import BOX_H
from explorer.figures.roofline import AXIS_TITLE_PX, LEGEND_LINE_PX, NOTE_PX, legend_rows
from explorer.figures.theme import PRESENTER_SCALE, visible_text
from explorer.notebook import Explorer
from tests.figure_goldens import DATA

# A 17 px title line (~7.7 px a character) on a 1280 px screen's 1,216 px figure, left of plotly's
# 250 px modebar: about 125 characters (measured in Chromium; the browser test checks the boxes)
CLEAR_OF_MODEBAR_CHARS = 125


@pytest.fixture(scope="module")
def explorer():
    return Explorer.open(DATA / "llama.json")  # tiny Llama: 6 query heads, 2 KV heads, head_dim 10


def labels(figure) -> dict[str, str]:
    trace = next(t for t in figure.data if t.name == "labels")
    return dict(zip(trace.customdata, (visible_text(t) for t in trace.text), strict=True))


def test_split_heads_and_rope_show_every_per_head_shape(explorer):
    shown, T = labels(explorer.figure("forward", 1)), explorer.run.steps[0].context_length
    assert shown["layers.0.attn.split_heads"].split("\n")[1] == f"[1,6,{T},10] [1,2,{T},10]×2"
    assert shown["layers.0.attn.rope"].split("\n")[1] == f"[1,6,{T},10] [1,2,{T},10]"
    assert not any("…" in text for text in shown.values())


def test_every_stop_has_a_full_frame(explorer):
    """The LM head, sample and detokenize fill one row of T: their frames still make them boxes."""
    figure = explorer.figure("forward", 1)
    frames = next(t for t in figure.data if t.name == "frames")
    assert {"lm_head", "sample", "detokenize", "final_norm"} <= set(frames.meta["stops"])
    ys = [y for y in frames.y if y is not None]
    heights = {round(max(ys[i:i + 5]) - min(ys[i:i + 5]), 6) for i in range(0, len(ys), 5)}
    assert heights == {round(BOX_H, 6)}
    assert len(ys) == 5 * len(frames.meta["stops"])


def test_the_journey_table_writes_every_shape_whole(explorer):
    figure = explorer.figure("journey", 1)
    texts = [t for t in figure.data if t.type == "scatter" and t.mode == "text"]
    rows = {y: text for trace in texts for y, text in zip(trace.y, trace.text, strict=True)}
    assert rows["layers.0.attn.split_heads"].endswith("→ [1,6,1,10] [1,2,1,10]×2")  # the decode column's
    assert all("…" not in text for trace in texts for text in trace.text)


def test_the_roofline_labels_each_sweep_at_its_far_end_only(explorer):
    figure = explorer.figure("roofline", 1, hardware="h100-sxm")
    for name, symbol in (("batch sweep", "B"), ("context sweep", "n")):
        sweep = next(t for t in figure.data if t.name == name)
        written = [text for text in sweep.text if text]
        assert len(written) == 1 and written[0].startswith(f"{symbol}=") and written[0] != f"{symbol}=1"


def test_the_roofline_legend_sits_under_its_note(explorer):
    figure = explorer.figure("roofline", 1, hardware="h100-sxm")
    note = next(a for a in figure.layout.annotations if a.name == "conventions")
    shown = [t.name for t in figure.data if t.showlegend is not False and t.name]
    assert figure.layout.legend.yref == "container" and figure.layout.legend.yanchor == "bottom"
    assert -note.yshift + NOTE_PX + LEGEND_LINE_PX * legend_rows(shown) <= figure.layout.margin.b
    assert note.yshift == -AXIS_TITLE_PX


@pytest.mark.parametrize("view, presenter", [("attention", False), ("lens", False), ("roofline", True),
                                             ("attention", True), ("lens", True)])
def test_no_title_line_is_longer_than_a_line_clear_of_the_modebar(explorer, view, presenter):
    figure = explorer.figure(view, 1, presenter=presenter, hardware="h100-sxm")
    width = CLEAR_OF_MODEBAR_CHARS / (PRESENTER_SCALE if presenter else 1)
    lines = visible_text(figure.layout.title.text).split("\n")
    assert all(len(line) <= width for line in lines), lines
