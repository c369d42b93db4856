"""The shared figure helpers: subplot grids from a cache, the trimmed template, the meta marker."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from explorer.figures.theme import (
    PRESENTER_SCALE,
    TEMPLATE,
    TITLE_CHARS,
    TITLE_FONT_SIZE,
    TITLE_LINE_PX,
    axis_key,
    base_layout,
    empty_figure,
    presenter_style,
    set_layout,
    subplot_grid,
    visible_text,
)


def test_a_grid_matches_make_subplots_and_each_call_gets_its_own_copy():
    specs = [[{"colspan": 2}, None], [{}, {}]]
    layout, cells = subplot_grid(["top", "", "right"], rows=2, cols=2, specs=specs, vertical_spacing=0.2)
    assert cells == {(1, 1): {"xaxis": "x", "yaxis": "y"}, (2, 1): {"xaxis": "x2", "yaxis": "y2"},
                     (2, 2): {"xaxis": "x3", "yaxis": "y3"}}
    assert [a["text"] for a in layout["annotations"]] == ["top", "right"]  # "" leaves a panel untitled
    assert layout["xaxis3"]["domain"] == [0.55, 1.0] and layout["yaxis"]["domain"] == pytest.approx([0.6, 1.0])
    layout["xaxis"]["domain"] = [0.3, 0.4]
    again, _ = subplot_grid(["a", "b", "c"], rows=2, cols=2, specs=specs, vertical_spacing=0.2)
    assert again["xaxis"]["domain"] == [0.0, 1.0]
    assert [a["text"] for a in again["annotations"]] == ["a", "b", "c"]


def test_shared_axes_are_linked():
    layout, cells = subplot_grid(["a", "b"], rows=1, cols=2, shared_yaxes=True)
    assert layout[axis_key(cells[1, 2]["yaxis"])]["matches"] == "y"
    assert axis_key("x2") == "xaxis2" and axis_key("y") == "yaxis"


def test_base_layout_replaces_the_default_template_with_the_trimmed_white_one():
    fig = base_layout(go.Figure(data=[{"type": "bar", "x": [1], "y": [2]}]), "journey", 3, "title", height=400)
    white = pio.templates["plotly_white"]
    assert fig.layout.template.layout.plot_bgcolor == white.layout.plot_bgcolor == "white"
    assert fig.layout.template.layout.xaxis.gridcolor == white.layout.xaxis.gridcolor
    assert fig.layout.template.data.bar == white.data.bar
    template = fig.layout.template.to_plotly_json()
    assert "pie" not in template["data"] and "polar" not in template["layout"]  # trimmed
    assert set(TEMPLATE["data"]) == {"bar", "scatter", "heatmap"}
    assert fig.layout.meta == {"view": "journey", "step": 3}
    assert (fig.layout.title.text, fig.layout.height, fig.layout.margin.l) == ("title", 400, 60)
    assert len(fig.to_json()) < 2_500


def test_set_layout_replaces_rather_than_merges():
    fig = set_layout(go.Figure(layout={"margin": {"l": 10, "t": 5}}), margin={"l": 99})
    assert (fig.layout.margin.l, fig.layout.margin.t) == (99, None)


def test_empty_figure_carries_its_message_and_meta():
    fig = empty_figure("sampling", "Run a prefill first")
    assert fig.layout.annotations[0].text == "Run a prefill first"
    assert fig.layout.meta == {"view": "sampling", "step": None}
    assert not fig.data and fig.layout.xaxis.visible is False


def test_presenter_style_scales_every_text_the_margins_and_the_height_and_keeps_the_marker():
    fig = go.Figure([{"type": "scatter", "x": [1], "y": [2], "mode": "text", "text": ["a"], "textfont": {"size": 10}},
                     {"type": "bar", "x": [1], "y": [2]}])
    base_layout(fig, "journey", 3, "title", height=400)
    set_layout(fig, annotations=[{"text": "note", "font": {"size": 12}}], xaxis={"tickfont": {"size": 14}},
               margin={"l": 60, "r": 20, "t": 90, "b": 40})
    presenter_style(fig)
    layout = fig.layout
    assert fig.data[0].textfont.size == 15 and fig.data[1].textfont.size is None  # a trace without text keeps none
    assert layout.annotations[0].font.size == 18 and layout.xaxis.tickfont.size == 21
    assert layout.title.font.size == round(TITLE_FONT_SIZE * 1.5) and layout.font.color == "#000000"
    assert (layout.margin.l, layout.margin.r, layout.margin.t, layout.margin.b) == (90, 20, 135, 60)
    assert layout.height == 600 and layout.meta == {"view": "journey", "step": 3}


def test_presenter_style_wraps_a_long_one_line_title_at_its_spaces_and_grows_the_figure_by_its_new_lines():
    words = [f'<span style="color: #{i:06d}">word {i}</span>' if i % 2 else f"word{i}" for i in range(50)]
    fig = base_layout(go.Figure(), "forward", 1, " ".join(words), height=400)
    set_layout(fig, margin={"l": 10, "r": 10, "t": 50, "b": 50})
    presenter_style(fig)
    lines = fig.layout.title.text.split("<br>")
    width = TITLE_CHARS / PRESENTER_SCALE
    assert len(lines) > 1 and all(len(visible_text(line)) <= width for line in lines)
    assert " ".join(lines) == " ".join(words)  # every word in order
    assert all(line.count("<span") == line.count("</span>") for line in lines)  # no cut inside a coloured word
    added = round(TITLE_LINE_PX * PRESENTER_SCALE * (len(lines) - 1))
    assert (fig.layout.margin.t, fig.layout.height) == (75 + added, 600 + added)
    assert fig.layout.title.yref == "container" and fig.layout.title.yanchor == "top"


def test_presenter_style_keeps_a_short_title_and_one_its_view_wrapped():
    for title in ("Roofline", "a view's own<br>" + "short line " * 5):
        fig = presenter_style(base_layout(go.Figure(), "roofline", 1, title, height=400))
        assert fig.layout.title.text == title and fig.layout.height == 600


def test_presenter_style_wraps_each_line_of_a_title_too_long_for_its_text():
    """The roofline's two lines of ~100 characters ran off the right edge at the presenter's size."""
    title = "first line<br>" + "long line " * 30
    fig = presenter_style(base_layout(go.Figure(), "roofline", 1, title, height=400))
    lines = fig.layout.title.text.split("<br>")
    assert lines[0] == "first line" and " ".join(lines[1:]).strip() == ("long line " * 30).strip()
    assert all(len(line) <= TITLE_CHARS / PRESENTER_SCALE for line in lines)
    assert fig.layout.height == 600 + round(TITLE_LINE_PX * PRESENTER_SCALE * (len(lines) - 2))


def test_presenter_style_never_starts_a_line_with_a_unit():
    title = "KV cache after the prefill: 48 positions × 3 layers × 2 KV heads; 22.5 KiB, 480 B per position"
    fig = presenter_style(base_layout(go.Figure(), "kv_cache", 0, "a<br>" + title, height=400))
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) > 2 and not any(line.split(" ")[0] in ("B", "KiB", "layers") for line in lines)


def test_presenter_style_moves_an_annotation_as_far_as_its_text_grows():
    """The roofline's note sits under the x axis' title by a shift; at 1.5x text it would meet it."""
    fig = base_layout(go.Figure(), "roofline", 0, "t")
    fig.add_annotation(text="note", x=0, y=0, xref="paper", yref="paper", yshift=-62, showarrow=False)
    assert presenter_style(fig).layout.annotations[0].yshift == round(-62 * PRESENTER_SCALE)
