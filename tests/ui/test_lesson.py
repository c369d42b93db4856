"""The guided lesson on a tiny model's real run: each page sets up and draws its view, and its numbers
are the run's own."""

from __future__ import annotations

import re

import gradio as gr
import numpy as np
import pytest

from explorer.analysis.measured import Scenario
from explorer.lesson import LESSON_BATCH, PAGES, LessonInputs, page_layer, page_text
from explorer.runner.probe import resolve_hardware
from explorer.ui import handlers, lesson
from explorer.ui.models import SHAPE_ONLY_PREFIX
from explorer.ui.views import every_layer_sinks

SAMPLED = (True, 0.9, 5, 0.8, 0.0, 4, 8)  # do_sample, temperature, top-k, top-p, min-p, seed, max new tokens
CONTROLS = (*SAMPLED, 0, False, "h100-sxm", "forward", False, "")  # then the view controls (VIEW_INPUTS)
STEP_OUTPUTS = handlers.STEP_OUTPUTS
VIEWS = ("forward", "journey", "attention", "kv_cache", "sampling", "roofline", "lens")


def prefill(served, choice=None):
    return handlers.ServedHandlers(served).on_prefill_click(
        None, None, choice or served.registry.default_choice, "", "Tell me a story", 9, False, "", False, False, False,
        *SAMPLED, 0, False, "h100-sxm", "forward")[0]


def turn(visit, index, delta, before=None, controls=CONTROLS):
    outputs = lesson.on_lesson_move(delta)(visit, index, before, *controls)
    return outputs[:STEP_OUTPUTS], dict(zip(lesson.LESSON_OUTPUTS, outputs[STEP_OUTPUTS:], strict=True))


def numbers(text: str) -> list[str]:
    return re.findall(r"\*\*([^*]+)\*\*", text)


def test_the_lesson_runs_a_decode_step_then_each_page_draws_its_view(served):
    visit = prefill(served)
    steps, state = turn(visit, None, 0)
    assert len(visit.run.steps) == 2 and "ran decode step 1 on your prompt" in state["lesson_text"]
    index = None
    for page_index, page in enumerate(PAGES):
        steps, state = turn(visit, index, 0 if index is None else 1)
        index = state["lesson_page"]
        assert index == page_index and state["shown"] == page.view
        assert state["tabs_selected"] == {"selected": page.view, "__type__": "update"}
        assert state["lesson_text"].startswith(f"**Lesson {page_index + 1} of {len(PAGES)}: {page.title}.**")
        if page.view in VIEWS:  # the equivalence experiment's tab is no view of the run: its button draws it
            figure = steps[8 + VIEWS.index(page.view)]
            assert figure.layout.meta == {"view": page.view, "step": 1}
        assert steps[5]["value"] == page_layer(page, len(visit.run.steps[0].kv))
        if page.view == "roofline":
            assert state["what_if"].batch == page.batch and state["wi_batch"] == str(page.batch)
        else:
            assert state["what_if"] == gr.skip()
    assert len(visit.run.steps) == 2  # only the first page needed a step
    _, state = turn(visit, index, 1)
    assert state["lesson_page"] == len(PAGES) - 1  # past the last page: stays there
    _, state = turn(visit, 0, -1)
    assert state["lesson_page"] == 0


def test_ending_the_lesson_puts_back_the_tab_the_layer_and_the_what_if_it_found(served):
    visit = prefill(served)
    own = Scenario(batch=4, kv="int8")
    found = (*SAMPLED, 2, False, "h100-sxm", "kv_cache", False, "", own)  # the KV cache tab, layer 2, a what-if
    _, state = turn(visit, None, 0, controls=found)
    before = state["lesson_before"]
    assert before == lesson.BeforeLesson("kv_cache", 2, own)
    batched = next(index for index, page in enumerate(PAGES) if page.batch == LESSON_BATCH)
    what_if = own
    while state["lesson_page"] < batched:  # on to the roofline's page that sets B = LESSON_BATCH
        page = PAGES[state["lesson_page"]]
        what_if = state["what_if"] if isinstance(state["what_if"], Scenario) else what_if
        controls = (*SAMPLED, page_layer(page, 3), False, "h100-sxm", page.view, False, "", what_if)
        _, state = turn(visit, state["lesson_page"], 1, before, controls)
        assert state["lesson_before"] == before  # what it found is kept while it is open
    assert state["what_if"].batch == LESSON_BATCH
    outputs = lesson.on_lesson_close(visit, before, *SAMPLED, 1, False, "h100-sxm", "roofline", False, "",
                                     state["what_if"])
    steps, state = outputs[:STEP_OUTPUTS], dict(zip(lesson.LESSON_OUTPUTS, outputs[STEP_OUTPUTS:], strict=True))
    assert state["what_if"] == own and state["wi_batch"] == "4"
    assert state["shown"] == "kv_cache" and state["tabs_selected"] == {"selected": "kv_cache", "__type__": "update"}
    assert steps[5]["value"] == 2 and state["lesson_page"] is None and state["lesson_before"] is None
    assert steps[8 + VIEWS.index("kv_cache")].layout.meta == {"view": "kv_cache", "step": 1}  # drawn as it was
    assert state["lesson_panel"] == {"visible": False, "__type__": "update"}


def test_ending_a_lesson_that_found_nothing_only_hides_it(served):
    outputs = lesson.on_lesson_close(None, None, *CONTROLS)
    state = dict(zip(lesson.LESSON_OUTPUTS, outputs[STEP_OUTPUTS:], strict=True))
    assert state["lesson_panel"] == {"visible": False, "__type__": "update"} and state["what_if"] == gr.skip()


def test_the_pages_say_the_runs_own_numbers(served):
    visit = prefill(served)
    turn(visit, None, 0)
    run, session = visit.run, visit.session
    step = run.steps[1]
    machine = resolve_hardware("h100-sxm")

    def text(key, layer=0):
        page = next(p for p in PAGES if p.key == key)
        return page_text(page, LessonInputs(run, 1, layer, machine, visit.attention.probs(1, layer)))

    T = len(run.steps[0].input_ids)
    assert numbers(text("prefill_decode"))[:3] == ["prefill", f"T = {T}", "decode"]
    assert f"**n = {T + 1}**" in text("prefill_decode")
    # the cache bytes: the cache's own tensors
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in session._cache.layers)
    kv = text("kv_cache")
    assert f"**{held / 2**10:.3g} KiB** (measured)" in kv
    # the attention row: the heads' mean of the newest row, its largest key
    probs = session.attention.probs(1, 2)[:, -1, :].mean(axis=0)
    assert f"the largest weight, **{probs.max():.2f}**, is on key {int(np.argmax(probs))} " in text("attention_row", 2)
    # sampling: the filters' survivors counted over the whole vocabulary
    kept = {stage.name: int(np.isfinite(stage.logits).sum()) for stage in step.sampling.stages}
    sampled = text("sampling")
    assert f"top-k keeps **{kept['top_k']:,}**" in sampled and f"top-p keeps **{kept['top_p']:,}**" in sampled
    assert f"**{step.sampling.stages[0].logits.size:,}** tokens" in sampled
    # the batch page: the GEMMs' intensity grows with B (about B for float32 weights' 4 bytes... at least 10x)
    one, many = (float(x.split()[0]) for x in numbers(text("batch"))[1:3])
    assert many > 10 * one and f"batch of {LESSON_BATCH}" in text("batch")
    gqa = text("gqa")
    h_q, h_kv = run.spec.n_heads, run.spec.n_kv_heads
    assert f"**{h_q} query heads** share **{h_kv} KV heads**" in gqa and f"**g = {h_q // h_kv}**" in gqa


def test_every_page_reads_on_a_shape_only_model(served):
    visit = prefill(served, SHAPE_ONLY_PREFIX + "qwen3-0.6b")
    _, state = turn(visit, None, 0)
    for index in range(len(PAGES)):
        _, state = turn(visit, index - 1 if index else None, 1 if index else 0)
        assert state["lesson_text"].startswith(f"**Lesson {index + 1} ")
    assert "no attention values to show" in page_text(PAGES[5], LessonInputs(visit.run, 1, 0, resolve_hardware("h100-sxm")))


def test_the_lesson_before_a_prefill_says_what_to_do():
    with pytest.raises(gr.Error, match="press Prefill, then open the lesson"):
        lesson.on_lesson_move(0)(None, None, *CONTROLS)


def test_a_saved_run_without_its_attention_still_reads(served, tmp_path):
    from explorer.saved import run_to_dict
    from explorer.trace import dumps

    live = prefill(served)
    turn(live, None, 0)  # a decode step
    data = run_to_dict(live.run, None)  # every matrix saved as null
    data["attention_left_out"] = "left out for the test"
    path = tmp_path / "run.json"
    path.write_bytes(dumps(data))
    saved = handlers.ServedHandlers(served).on_import_upload(None, str(path), 0, False, "h100-sxm", "forward")[0]
    steps, state = turn(saved, 4, 1)
    assert state["lesson_page"] == 5 and "no attention values to show" in state["lesson_text"]
    figure = steps[8 + VIEWS.index("attention")]  # the view says why it is empty
    assert "holds no attention" in figure.layout.annotations[0].text


def test_the_lens_sinks_and_equivalence_pages_say_the_runs_own_numbers(served):
    visit = prefill(served)
    turn(visit, None, 0)
    run, machine = visit.run, resolve_hardware("h100-sxm")
    page = {p.key: p for p in PAGES}
    lens = run.lens(1)
    hits = [row for row in range(lens.top_ids.shape[0]) if lens.top_ids[row, -1, 0] == lens.next_ids[-1]]
    text = page_text(page["lens"], LessonInputs(run, 1, 0, machine))
    assert f"**{lens.next_probs[-1, -1]:.2f}** at the output" in text
    assert (f"after **layer {hits[0] - 1}**" if hits[0] > 0 else "of the embedding itself") in text
    sinks = every_layer_sinks(visit, 1)
    text = page_text(page["sinks"], LessonInputs(run, 1, 2, machine, sinks=sinks, sink_threshold=0.2))
    assert f"**{(sinks > 0.2).mean():.0%}** of the {sinks.size} (layer, head) pairs" in text
    assert f"{int((sinks[2] > 0.2).sum())} in layer 2 (shown" in text
    assert "Press **Run the experiment**" in page_text(page["equivalence"], LessonInputs(run, 1, 0, machine))
    handlers.on_equivalence_click(visit, 2)
    _, state = turn(visit, len(PAGES) - 2, 1)
    recompute = visit.run.equivalence.comparisons[-1]
    assert f"no KV cache (full recompute): up to **{max(recompute.max_abs):.1e}**" in state["lesson_text"]
