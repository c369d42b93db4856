"""The logit lens and the attention sinks as the app draws them, on the tiny Llama's real steps."""

from __future__ import annotations

import json

import gradio as gr
import numpy as np
import pytest

from explorer.analysis.sinks import key_importance
from explorer.errors import ConfigError
from explorer.figures.attention import stack_attention
from explorer.figures.views import VIEWS
from explorer.saved import load_run, save_run
from explorer.ui import handlers
from explorer.ui.views import every_layer_sinks

GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)
VIEW = (1, False, "h100-sxm", "attention")  # layer, average over heads, roofline hardware, the view on screen
VIEW_INDEX = VIEWS.index("attention")


def _visit(served, decode_steps: int = 2):
    visit, *_ = handlers.ServedHandlers(served).on_prefill_click(
        None, None, served.registry.default_choice, "", "Sinks and lenses", 17, False, "", False, False, False,
        *GREEDY, *VIEW)
    for _ in range(decode_steps):
        visit, *_ = handlers.on_decode_click(visit, *GREEDY, *VIEW)
    return visit


def test_every_layers_sinks_are_the_first_tokens_importance_of_its_stacked_matrix(served):
    visit = _visit(served)
    for step in range(3):
        sinks = every_layer_sinks(visit, step)
        for layer in range(3):
            stacked = stack_attention([visit.attention.probs(s, layer) for s in range(step + 1)])
            np.testing.assert_allclose(sinks[layer], key_importance(stacked)[:, 0], rtol=1e-6)


def test_a_saved_run_has_the_same_sinks_from_its_sums_from_its_matrices_and_without_attention(served, tmp_path):
    """The sums taken in the steps, or (a run saved before them) every layer's matrix, give the same
    sinks; a run saved without attention still has them from its sums."""
    from explorer.ui.hosting import LOCAL
    from explorer.ui.views import Visit

    visit = _visit(served)
    path = save_run(visit.run, visit.attention, tmp_path / "run.json")
    bare = save_run(visit.run, visit.attention, tmp_path / "bare.json", "left out")
    data = json.loads(path.read_text(encoding="utf-8"))
    for trace in data["traces"]:
        for record in trace["attention"]:
            del record["first_key_sums"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data), encoding="utf-8")
    for file in (path, older, bare):
        replay = Visit.replay(*load_run(file), LOCAL)
        np.testing.assert_allclose(every_layer_sinks(replay, 2), every_layer_sinks(visit, 2), rtol=1e-9,
                                   err_msg=file.name)
    data["attention_left_out"] = "left out"
    for trace in data["traces"]:
        for record in trace["attention"]:
            record["probs"] = None
    older.write_text(json.dumps(data), encoding="utf-8")
    assert every_layer_sinks(Visit.replay(*load_run(older), LOCAL), 2) is None


def test_the_threshold_moves_the_sinks_marked_in_the_attention_view(served):
    visit = _visit(served)
    importance = every_layer_sinks(visit, 2)[1]  # layer 1, the one shown
    threshold = float(np.sort(importance)[2])  # three heads at or under it, three over
    figure = handlers.on_sink_threshold_change(visit, threshold, 2, 1, False)
    titles = [note.text for note in figure.layout.annotations if note.text.startswith("q head")]
    assert [title.endswith(" ●") for title in titles] == list(importance > threshold)
    assert f"> {threshold:g}): 3 of 6 heads here" in figure.layout.title.text
    again = handlers.on_view_change(visit, 2, 1, False, "h100-sxm", "attention", False, "")
    assert again[VIEW_INDEX].layout.title.text == figure.layout.title.text  # kept for later redraws


def test_the_lens_statistic_is_kept_for_later_redraws(served):
    visit = _visit(served)
    figure = handlers.on_lens_stat_change(visit, "entropy", 2)
    np.testing.assert_array_equal(figure.data[0].z[:, -1], visit.run.lens(2).entropy_bits[:, 0])
    redrawn = handlers.on_tab_select("lens")(visit, 2, 1, False, "h100-sxm")[1]
    np.testing.assert_array_equal(redrawn.data[0].z, figure.data[0].z)
    assert handlers.on_lens_stat_change(visit, "<b>", 2) == gr.skip()



def test_the_equivalence_experiment_runs_on_the_prefills_prompt_and_is_kept(served):
    visit = _visit(served, decode_steps=0)
    figure = handlers.on_equivalence_click(visit, 50)  # past the app's bound: that many steps, no more
    result = visit.run.equivalence
    assert len(result.tokens) == handlers.APP_EQUIVALENCE_STEPS and result.prompt_tokens == len(visit.run.ids) - 1
    assert result.tokens[0] == visit.run.steps[0].sampling.token_id  # the reference is the run's own greedy choice
    assert figure.layout.meta == {"view": "equivalence", "step": None} and len(figure.data[0].y) == 4
    assert figure.data[0].text[3][0] == "0"  # the prefill recomputed is the prefill: the same bits


def test_the_equivalence_experiment_needs_a_model():
    with pytest.raises(gr.Error, match="Run a prefill first"):
        handlers.on_equivalence_click(None, 4)


def test_a_saved_run_keeps_its_lens_and_experiment_and_refuses_a_damaged_one(served, tmp_path):
    visit = _visit(served, decode_steps=1)
    handlers.on_equivalence_click(visit, 2)
    path = save_run(visit.run, visit.attention, tmp_path / "run.json")
    loaded, attention = load_run(path)
    assert loaded.equivalence == visit.run.equivalence
    for index in range(len(visit.run.steps)):
        mine, theirs = visit.run.lens(index), loaded.lens(index)
        np.testing.assert_array_equal(theirs.top_ids, mine.top_ids)
        np.testing.assert_array_equal(theirs.entropy_bits, mine.entropy_bits)
    data = json.loads(path.read_text())
    data["equivalence"]["comparisons"][0]["max_abs"][1] = -1.0
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"equivalence.comparisons\[0\].max_abs\[1\] must be a number in \[0, inf\]"):
        load_run(tmp_path / "bad.json")


def test_the_tab_shows_the_runs_experiment_once_run(served):
    visit = _visit(served, decode_steps=0)
    assert handlers.on_equivalence_tab(visit).layout.meta == {"view": "equivalence", "step": None}
    assert not handlers.on_equivalence_tab(visit).data
    handlers.on_equivalence_click(visit, 1)
    assert handlers.on_equivalence_tab(visit).data[0].type == "heatmap"
