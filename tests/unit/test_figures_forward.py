"""The forward-pass diagram on hand-built runs: the hover's shape equation in symbols and numbers,
computed costs and measured times labelled as such, rows wrapped at the MLP, and each dimension
symbol in one colour across the views."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from figure_traces import SMOLLM2, TINY, hand_run

from explorer.analysis.measured import stop_costs
from explorer.figures.attention import stack_attention
from explorer.figures.dims import DIM_COLOURS, coloured
from explorer.figures.forward import forward_figure
from explorer.figures.forward_layout import PLUS_CHARS, ROW_CHARS
from explorer.figures.journey import journey_figure
from explorer.figures.view_types import AttentionData, AttentionRows, ForwardData, RunData, ViewOptions
from explorer.figures.views import draw

SPAN = re.compile(r'<span style="color:(#[0-9a-f]{6})">([\w]+)</span>')


@pytest.fixture(scope="module")
def run():
    return hand_run(SMOLLM2, decode_steps=3)[0]


def hovers(fig) -> dict[str, str]:
    nodes = next(trace for trace in fig.data if trace.name == "nodes")
    return dict(zip(nodes.customdata, nodes.hovertext, strict=True))


def plain(text: str) -> str:
    return re.sub(r"</?span[^>]*>", "", text)


def forward(run, step: int = 3, layer: int = 2, **options):
    costs = tuple(stop_costs(run.spec, run.step(s), layer) for s in ((0, step) if step else (0,)))
    return draw("forward", ForwardData(run, stop_costs=costs),
                ViewOptions(step=step, layer=layer, average_heads=False, hardware="h100-sxm", **options))


def test_a_gemm_hover_gives_its_equation_in_symbols_and_in_numbers(run):
    hover = plain(hovers(forward(run))["layers.2.attn.q_proj"])
    assert "[B, T, d] · W_q [h_q·d_h, d]ᵀ → [B, T, h_q·d_h]" in hover
    assert "prefill: [1, 11, 576] · [576, 576]ᵀ → [1, 11, 576]" in hover
    assert "step 3: [1, 1, 576] · [576, 576]ᵀ → [1, 1, 576]" in hover
    assert "engines: Engines merge W_q, W_k and W_v" in hover


def test_costs_are_estimated_and_times_measured_in_the_hover(run):
    hover = plain(hovers(forward(run))["layers.2.mlp.down_proj"])
    flops = 2 * 11 * 1536 * 576  # prefill: 2 * rows * d_ff * d
    assert f"estimated (cost model): {flops / 1e6:.3g} MFLOP" in hover
    wall = run.step(3).op("layers.2.mlp.down_proj").wall_ms
    assert f"measured: {wall:.2f} ms (one run; noisy)" in hover


def test_a_shape_only_step_says_it_was_not_timed(run):
    prefill = replace(run.step(0), shape_only=True)
    fig = forward_figure(prefill, None, 0, 30)
    assert "not timed (shape-only" in hovers(fig)["layers.0.attn.scores"]
    assert "cost not modelled" in hovers(fig)["layers.0.attn.scores"]  # no costs were given


def test_the_mlp_starts_a_new_row_and_rows_stay_within_the_width(run):
    fig = forward(run)
    nodes = next(trace for trace in fig.data if trace.name == "nodes")
    y = dict(zip(nodes.customdata, nodes.y, strict=True))
    assert y["layers.2.post_attn_norm"] < y["layers.2.attn_residual"] < y["layers.2.attn.v_proj"]
    assert y["embed"] == y["layers.2.attn_residual"] and y["final_norm"] == y["layers.2.mlp_residual"]
    assert fig.layout.xaxis.range[1] <= ROW_CHARS + PLUS_CHARS + 1  # a residual add may close a full row


def test_the_weights_are_the_same_box_for_prefill_and_decode(run):
    fig = forward(run)
    weights = next(trace for trace in fig.data if trace.name == "weights")
    assert "layers.2.attn.q_proj" in weights.meta["stops"] and weights.meta["tied"] == ["embed", "lm_head"]
    labels = next(trace for trace in fig.data if trace.name == "labels")
    text = dict(zip(labels.customdata, labels.text, strict=True))
    assert plain(text["W:lm_head"]) == "<b>W_lm (tied)</b><br>[49152,576]"


def test_each_dimension_symbol_has_one_colour_in_every_view():
    run, attention = hand_run(TINY, decode_steps=2)
    texts = [" ".join(hovers(forward_figure(run.step(0), run.step(2), 1, 2)).values()),
             " ".join(trace.hovertext and " ".join(trace.hovertext) or ""
                      for trace in journey_figure(run.step(0), run.step(2), 1).data)]
    options = ViewOptions(step=2, layer=1, average_heads=False, hardware="h100-sxm")
    for view, data in (("kv_cache", RunData(run)),
                       ("attention", AttentionData(run, rows=AttentionRows(stack_attention([attention.probs(s, 1) for s in range(3)]))))):
        layout = draw(view, data, options).layout
        texts.append(" ".join([layout.title.text, *(note.text for note in layout.annotations)]))
    seen: dict[str, set[str]] = {}
    for text in texts:
        for colour, symbol in SPAN.findall(text):
            seen.setdefault(symbol, set()).add(colour)
    assert {"T", "d", "h_q", "h_kv", "d_h", "n", "V"} <= set(seen)
    assert all(colours == {DIM_COLOURS[symbol]} for symbol, colours in seen.items())
    in_views = [{symbol for _, symbol in SPAN.findall(text)} for text in texts]
    assert all("h_kv" in symbols for symbols in in_views)  # every view names h_kv in its colour


def test_only_whole_symbols_are_coloured():
    assert coloured("W_q dtype d_ff") == f'W_q dtype <span style="color:{DIM_COLOURS["d_ff"]}">d_ff</span>'
