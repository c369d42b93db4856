"""The forward-pass diagram of a real run on a tiny random model of every traced family: one node per
stop of the family's stop list, each labelled with the shape the hooks measured; a weight node per
weighted stop with the weight's real shape; QK-norm only where the family has it; the decode step's
boxes one row and its KV strip n positions."""

from __future__ import annotations

import re

import pytest
from tiny_models import DIMS, tiny_model

from explorer.config import SamplingSettings
from explorer.families import traced_family
from explorer.figures.forward_layout import PRESENTER_ROW_CHARS, ROW_CHARS
from explorer.figures.views import ViewOptions
from explorer.runner.session import InferenceSession
from explorer.stops import stop_table
from explorer.ui.hosting import LOCAL
from explorer.ui.views import Visit, render

FAMILIES = ["llama", "qwen3", "qwen2", "mistral", "phi3", "gemma3_text", "gpt2"]
PROMPT = "What is 2+2?"
LAYER = 1


@pytest.fixture(scope="module", params=FAMILIES)
def visit(request):
    loaded = tiny_model(request.param)
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=10))
    session.prefill(PROMPT)
    for _ in range(3):
        session.decode_step()
    return Visit.start(session, LOCAL), loaded


def forward(visit, step: int, presenter: bool = False):
    return render(visit, ViewOptions(step=step, layer=LAYER, average_heads=False, hardware="h100-sxm",
                                     presenter=presenter), "forward")


def trace_named(fig, name: str):
    return next(trace for trace in fig.data if trace.name == name)


def labels(fig) -> dict[str, str]:
    trace = trace_named(fig, "labels")
    return {key: re.sub(r"<[^>]+>", " ", text) for key, text in zip(trace.customdata, trace.text, strict=True)}


def module_weight(model, stop: str) -> list[int]:
    """The weight's shape read from the model's own parameters, by the family's module path."""
    family = traced_family(model.config.model_type)
    module = model.get_submodule(family.top_modules[stop]) if stop in family.top_modules else \
        model.get_submodule(f"{family.layers}.{LAYER}.{family.layer_modules[stop.split('.', 2)[2]]}")
    return list(module.weight.shape)


def test_one_node_per_stop_of_the_family(visit):
    visit, loaded = visit
    family = traced_family(loaded.model.config.model_type)
    expected = [name for name, _, layer in stop_table(family, DIMS["num_hidden_layers"], "prefill")
                if layer in (None, LAYER)]
    fig = forward(visit, 3)
    stops = [key for key in trace_named(fig, "nodes").customdata if not key.startswith("W:") and key != "kv_cache"]
    assert sorted(stops) == sorted(expected)
    assert fig.layout.meta == {"view": "forward", "step": 3}
    has_qk_norm = any(key.endswith("attn.q_norm") for key in stops)
    assert has_qk_norm == family.qk_norm


def test_every_stop_is_labelled_with_its_measured_shapes(visit):
    visit, _ = visit
    fig, prefill, decode = forward(visit, 3), visit.run.step(0), visit.run.step(3)
    text = labels(fig)
    for op in prefill.ops:
        if op.layer not in (None, LAYER) or op.name.endswith("_residual") or op.name == "detokenize":
            continue
        compact = "[" + ",".join(map(str, op.output_shapes[0])) + "]"
        assert compact in text[op.name], (op.name, text[op.name])
        other = decode.op(op.name) if op.name != "tokenize" else None
        if other is not None:
            assert "[" + ",".join(map(str, other.output_shapes[0])) + "]" in text[op.name]


def test_weights_are_nodes_with_the_models_own_shapes(visit):
    visit, loaded = visit
    fig = forward(visit, 3)
    text = labels(fig)
    weights = trace_named(fig, "weights").meta["stops"]
    gemms = [op.name for op in visit.run.step(0).ops if op.kind == "gemm" and op.layer in (None, LAYER)]
    assert set(gemms) <= set(weights) and "embed" in weights
    for stop in gemms + ["embed"]:
        shape = module_weight(loaded.model, stop)
        assert "[" + ",".join(map(str, shape)) + "]" in text["W:" + stop], stop
    tied = bool(loaded.model.config.tie_word_embeddings)
    assert trace_named(fig, "weights").meta["tied"] == (["embed", "lm_head"] if tied else [])


def test_decode_boxes_are_one_row_and_the_kv_strip_n_positions(visit):
    visit, _ = visit
    fig = forward(visit, 3)
    prefill_boxes, decode_boxes = trace_named(fig, "prefill"), trace_named(fig, "step 3")
    T = len(visit.run.step(0).input_ids)
    assert prefill_boxes.meta["rows"] == T and decode_boxes.meta["rows"] == 1
    heights = {}
    for trace in (prefill_boxes, decode_boxes):
        ys = [y for y in trace.y]
        boxes = [ys[i:i + 6] for i in range(0, len(ys), 6)]
        heights[trace.name] = dict(zip(trace.meta["stops"], (max(b[:5]) - min(b[:5]) for b in boxes), strict=True))
    q = next(name for name in heights["prefill"] if name.endswith("attn.o_proj"))
    # one row of the prefill's T (or the thinnest box drawn)
    assert heights["step 3"][q] == pytest.approx(max(heights["prefill"][q] / T, 0.07 * 0.86))
    assert heights["prefill"]["lm_head"] < heights["prefill"][q]  # logits for the last position only
    lengths = [visit.run.step(step).kv[LAYER].key_shape[2] for step in (0, 3)]
    assert trace_named(fig, "kv cache").meta["positions"] == lengths
    if visit.run.spec.window(LAYER) is None:  # a sliding-window layer's cache keeps its window
        assert lengths == [T, T + 3]


def test_the_prefill_alone_has_no_decode_boxes(visit):
    visit, _ = visit
    fig = forward(visit, 0)
    names = [trace.name for trace in fig.data]
    assert "prefill" in names and not any(name.startswith("step ") for name in names)
    assert trace_named(fig, "kv cache").meta["positions"] == [visit.run.step(0).kv[LAYER].key_shape[2]]


def test_presenter_mode_wraps_into_shorter_rows(visit):
    visit, _ = visit
    normal, presenter = forward(visit, 3), forward(visit, 3, presenter=True)
    assert normal.layout.xaxis.range[1] <= ROW_CHARS + 1
    assert presenter.layout.xaxis.range[1] <= PRESENTER_ROW_CHARS + 1
    assert labels(presenter) == labels(normal)
