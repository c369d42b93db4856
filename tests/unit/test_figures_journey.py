"""The journey figure from hand-built traces: rows, columns, colours, hover text, meta marker, and wall
times as medians over the layers with their spread, noise greyed, none at all for a shape-only step."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from figure_traces import TINY, run_traces

from explorer.families import FAMILIES
from explorer.figures.journey import NOISE_COLOUR, journey_figure
from explorer.figures.stop_docs import weight_shape
from explorer.figures.theme import kind_colour
from explorer.stop_catalogue import CATALOGUE
from explorer.stops import layer_stops, stop_table

TRACES = run_traces(TINY, decode_steps=2)
PREFILL, DECODE = TRACES[0], TRACES[2]


def hover_of(fig, name: str, axis: str = "x") -> str:
    """The hover text of stop `name` in the shape column on `axis` (x: prefill, x3: decode), without
    the colour spans of the dimension symbols."""
    for trace in fig.data:
        if trace.type == "bar" and trace.xaxis == axis and name in trace.y:
            return re.sub(r"</?span[^>]*>", "", trace.hovertext[list(trace.y).index(name)])
    raise KeyError(name)


def traces_on(fig, axis: str):
    return [t for t in fig.data if t.xaxis == axis]


def test_rows_are_the_layers_stops_and_the_outer_ones_in_execution_order():
    fig = journey_figure(PREFILL, DECODE, 1)
    expected = ["tokenize", "embed"] + [op.name for op in PREFILL.ops if op.layer == 1] + [
        "final_norm", "lm_head", "sample", "detokenize"]
    assert list(fig.layout.yaxis.categoryarray) == expected
    assert fig.layout.yaxis.autorange == "reversed"  # first stop at the top
    assert len(expected) == 2 + 20 + 4
    shown = {name for t in fig.data if not t.showlegend for name in t.y}
    assert shown == set(expected)
    assert not any(name.startswith("layers.0.") for name in shown)
    assert list(fig.layout.yaxis.ticktext)[2:5] == ["input_norm", "attn.q_proj", "attn.k_proj"]


def test_decode_column_shows_the_decode_steps_shapes():
    fig = journey_figure(PREFILL, DECODE, 0)
    text = traces_on(fig, "x3")[-1]
    row = dict(zip(text.y, text.text, strict=True))
    assert row["layers.0.attn.scores"] == "[1,4,1,8] [1,4,13,8] → [1,4,1,13]"
    assert row["layers.0.attn.kv_cache_write"] == "[1,2,1,8]×2 → [1,2,13,8]×2"
    assert row["tokenize"] == "(not in this step)"
    prefill_row = dict(zip(traces_on(fig, "x")[-1].y, traces_on(fig, "x")[-1].text, strict=True))
    assert prefill_row["layers.0.attn.scores"] == "[1,4,11,8]×2 → [1,4,11,11]"  # Q and expanded K
    assert fig.layout.annotations[2].text == "step 2: in → out (T=1, n=13)"
    assert fig.layout.meta == {"view": "journey", "step": 2}


def test_without_a_decode_step_the_decode_column_asks_for_one():
    fig = journey_figure(PREFILL, None, 0)
    assert traces_on(fig, "x3") == [] and traces_on(fig, "x4") == []
    assert "run a decode step" in [a.text for a in fig.layout.annotations]
    assert fig.layout.meta == {"view": "journey", "step": 0}


def wall_traces(fig, axis: str) -> dict[str, dict]:
    """The wall-time column on `axis` (x2: prefill, x4: decode): trace name -> {row name: (x, ...)}."""
    return {t.name: t for t in traces_on(fig, axis)}


def test_wall_bars_are_each_stops_median_over_the_layers_with_its_spread_and_the_layers_own():
    fig = journey_figure(PREFILL, DECODE, 1)
    for axis, step in (("x2", PREFILL), ("x4", DECODE)):
        walls = wall_traces(fig, axis)
        bars, spread, own, labels = walls["wall time"], walls["p10-p90"], walls["layer 1"], walls["wall ms"]
        row = {name: i for i, name in enumerate(bars.y)}
        whisker = {name: i for i, name in enumerate(spread.y)}
        for stop in ("attn.q_proj", "attn.softmax", "mlp.down_proj"):
            times = np.array([step.op(f"layers.{i}.{stop}").wall_ms for i in range(TINY.n_layers)])
            i, j = row[f"layers.1.{stop}"], whisker[f"layers.1.{stop}"]
            assert bars.x[i] == spread.x[j] == pytest.approx(np.median(times))
            assert spread.x[j] + spread.error_x.array[j] == pytest.approx(np.percentile(times, 90))
            assert spread.x[j] - spread.error_x.arrayminus[j] == pytest.approx(np.percentile(times, 10))
            assert labels.text[i] == f"{np.median(times):.2f}"
            assert bars.marker.pattern.shape[i] == ""  # repeated measurements: not hatched
            mark = dict(zip(own.y, own.x, strict=True))[f"layers.1.{stop}"]
            assert mark == step.op(f"layers.1.{stop}").wall_ms  # the shown layer's own time, a diamond
        lm_head = row["lm_head"]  # outside the layers: one measurement, hatched, no whisker, no diamond
        assert bars.x[lm_head] == step.op("lm_head").wall_ms and bars.marker.pattern.shape[lm_head] == "/"
        assert "lm_head" not in spread.y and "lm_head" not in own.y
        assert labels.text[row["layers.1.attn.split_heads"]] == "view"
    assert fig.layout.xaxis2.type == "log" and "ms" in fig.layout.xaxis2.title.text
    assert fig.layout.annotations[1].text == "wall time<br>median of 2 layers"
    key = next(a.text for a in fig.layout.annotations if a.text.startswith("wall time, measured"))
    assert "median over the 2 layers" in key and "one measurement" in key and "below 0.01 ms" in key


def test_hover_says_what_the_time_is_and_how_far_to_trust_it():
    fig = journey_figure(PREFILL, DECODE, 1)
    times = [PREFILL.op(f"layers.{i}.attn.softmax").wall_ms for i in range(2)]
    own = PREFILL.op("layers.1.attn.softmax").wall_ms
    assert (f"wall (measured): median of 2 layers {np.median(times):.2f} ms (p10-p90 {np.percentile(times, 10):.2f}-"
            f"{np.percentile(times, 90):.2f}, range {min(times):.2f}-{max(times):.2f} ms); layer 1 itself "
            f"{own:.2f} ms") in hover_of(fig, "layers.1.attn.softmax")
    assert f"wall (measured): {PREFILL.op('lm_head').wall_ms:.2f} ms, one measurement" in hover_of(fig, "lm_head")
    assert "wall (measured): no kernel (a view)" in hover_of(fig, "layers.1.attn.split_heads")


def test_a_time_under_the_noise_floor_is_grey_and_labelled_noise():
    ops = [replace(op, wall_ms=0.004) if op.name.endswith("attn.gqa_expand") else op for op in PREFILL.ops]
    fig = journey_figure(replace(PREFILL, ops=ops), None, 0)
    walls = wall_traces(fig, "x2")
    i = list(walls["wall time"].y).index("layers.0.attn.gqa_expand")
    assert walls["wall time"].marker.color[i] == NOISE_COLOUR and walls["wall ms"].text[i] == "noise"
    assert "(below 0.01 ms: the timer's resolution and overhead, noise)" in hover_of(fig, "layers.0.attn.gqa_expand")
    q_proj = list(walls["wall time"].y).index("layers.0.attn.q_proj")
    assert walls["wall time"].marker.color[q_proj] == kind_colour("gemm")


def test_a_shape_only_step_draws_no_wall_time():
    prefill, decode = (replace(step, shape_only=True, device="meta") for step in (PREFILL, DECODE))
    fig = journey_figure(prefill, decode, 0)
    assert traces_on(fig, "x2") == [] and traces_on(fig, "x4") == []  # no bar, no diamond, no label
    assert not fig.layout.xaxis2.visible and not fig.layout.xaxis4.visible
    notes = [a.text for a in fig.layout.annotations]
    assert notes.count("shape-only:<br>no compute,<br>no times") == 2
    assert notes[1] == notes[3] == "no wall time" and not any("measured" in note for note in notes)
    assert "shape-only: no times" in fig.layout.title.text
    hover = hover_of(fig, "layers.0.attn.q_proj")
    assert "wall: not timed (shape-only: no compute ran)" in hover and " ms" not in hover and "measured" not in hover
    assert [t.name for t in traces_on(fig, "x")][:1] == ["stop"]  # the shapes are still drawn


def test_each_row_has_its_kinds_colour_and_each_kind_one_legend_entry():
    fig = journey_figure(PREFILL, DECODE, 0)
    for axis, step in (("x", PREFILL), ("x2", PREFILL), ("x3", DECODE), ("x4", DECODE)):
        (bars,) = [t for t in traces_on(fig, axis) if t.type == "bar" and t.y]
        assert list(bars.marker.color) == [kind_colour(step.op(name).kind) for name in bars.y]  # none is noise
    assert "tokenize" not in traces_on(fig, "x4")[0].y  # the decode step has no tokenize: no bar
    legend = [t for t in fig.data if t.showlegend]
    assert sorted(t.name for t in legend) == sorted({op.kind for op in PREFILL.ops})
    assert all(t.marker.color == kind_colour(t.name) and t.y == (None,) for t in legend)


def test_hover_gives_formula_symbols_numbers_and_weight_shape():
    fig = journey_figure(PREFILL, DECODE, 1)
    k_proj = hover_of(fig, "layers.1.attn.k_proj")
    assert "K = X · W_kᵀ" in k_proj and "[B, T, d] → [B, T, h_kv·d_h]" in k_proj
    assert "[1, 11, 32] → [1, 11, 16]" in k_proj
    assert "W_k [h_kv·d_h, d] = [16, 32]" in k_proj
    assert "W_down [d, d_ff] = [32, 37]" in hover_of(fig, "layers.1.mlp.down_proj")
    assert "W_gate [d_ff, d] = [37, 32]" in hover_of(fig, "layers.1.mlp.gate_proj")
    assert "E [V, d] = [97, 32]" in hover_of(fig, "embed")
    assert "W_lm [V, d] = [97, 32]" in hover_of(fig, "lm_head", "x3")
    assert "γ [d] = [32]" in hover_of(fig, "layers.1.post_attn_norm")
    scores = hover_of(fig, "layers.1.attn.scores", "x3")
    assert "S = Q·Kᵀ / √d_h" in scores and "weight" not in scores and "[1, 4, 1, 13]" in scores
    assert "rotate_half(q)" in hover_of(fig, "layers.1.attn.rope")
    assert "silu(gate) ⊙ up" in hover_of(fig, "layers.1.mlp.act")


def test_weight_shape_comes_from_the_stops_shapes():
    ops = {op.name: op for op in PREFILL.ops}
    assert weight_shape(ops["layers.0.attn.v_proj"], 97) == [16, 32]
    assert weight_shape(ops["layers.0.input_norm"], 97) == [32]
    assert weight_shape(ops["embed"], 97) == [97, 32]
    assert weight_shape(ops["layers.0.attn.softmax"], 97) is None


def test_every_stop_of_every_family_has_a_formula():
    outer = {name for family in FAMILIES.values() if family.traced
             for name, _, layer in stop_table(family, 1, "prefill") if layer is None}  # GPT-2: pos_embed, embed_add
    names = outer | {name for family in FAMILIES.values() if family.traced for moe in {False, family.moe}
                     for name, _ in layer_stops(family, moe)}
    assert names == set(CATALOGUE)


def test_a_layer_the_model_lacks_is_refused():
    with pytest.raises(ValueError, match="layer 2"):
        journey_figure(PREFILL, None, 2)


def test_gpt2s_hovers_give_its_layernorm_and_its_conv1d_weights_as_stored():
    """GPT-2's norms are LayerNorms (a mean and a bias β), its layer GEMMs `Conv1D`: X · W + b, W stored
    [in, out]; its LM head is an `nn.Linear` (tied to the embedding), [V, d]. The same stops of a
    Llama keep X · Wᵀ and RMSNorm."""
    from figure_traces import GPT2

    from explorer.figures.forward import forward_figure

    prefill, decode = run_traces(GPT2, decode_steps=1)
    journey = journey_figure(prefill, decode, 1, FAMILIES["gpt2"])
    qkv = hover_of(journey, "layers.1.attn.qkv_proj")
    assert "[Q K V] = X · W_qkv + b (Conv1D)" in qkv and "W_qkv [d, (h_q+2·h_kv)·d_h] = [24, 72]" in qkv
    assert "W_down [d_ff, d] = [37, 24]" in hover_of(journey, "layers.1.mlp.down_proj")
    assert "(x − mean(x)) / √(var(x) + ε) ⊙ γ + β" in hover_of(journey, "layers.1.input_norm")
    assert "W_lm [V, d] = [97, 24]" in hover_of(journey, "lm_head") and "ᵀ" in hover_of(journey, "lm_head")
    nodes = next(trace for trace in forward_figure(prefill, decode, 1, 2, family=FAMILIES["gpt2"]).data
                 if trace.name == "nodes")
    forward_qkv = re.sub(r"</?span[^>]*>", "", dict(zip(nodes.customdata, nodes.hovertext, strict=True))[
        "layers.1.attn.qkv_proj"])
    assert "X · W_qkv + b (Conv1D)" in forward_qkv and "[1, 1, 24] · [24, 72] → [1, 1, 72]" in forward_qkv
    assert "[B, T, d] · W_qkv [d, (h_q+2·h_kv)·d_h] → " in forward_qkv
    llama = journey_figure(PREFILL, DECODE, 1, FAMILIES["llama"])
    assert "K = X · W_kᵀ" in hover_of(llama, "layers.1.attn.k_proj")
    assert "√(mean(x²) + ε)" in hover_of(llama, "layers.1.input_norm")
