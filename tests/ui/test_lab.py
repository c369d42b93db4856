"""The app's Lab tab through its handlers: an experiment runs on the page's prompt and draws its
figure and lesson; its boxes follow the experiment picked; bad input is a toast that keeps the page's
session; hosted mode caps the parameters at the API too."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from explorer.lab.table import LAB
from explorer.ui import handlers
from explorer.ui.hosting import HOSTED, Served
from explorer.ui.models import ModelRegistry
from explorer.ui.views import Visit

GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)
VIEW = (0, False, "h100-sxm", "forward")
PROMPT = "Hello there, how are you?"


def prefilled(served) -> Visit:
    return handlers.ServedHandlers(served).on_prefill_click(
        None, None, served.registry.default_choice, "", PROMPT, 17, False, "", False, False, False, *GREEDY, *VIEW)[0]


def test_the_prefix_experiment_runs_on_the_pages_prompt(served):
    visit = prefilled(served)
    figure, text = handlers.on_lab_click(visit, "prefix", 10)
    assert figure.layout.meta == {"view": "lab-prefix", "step": None}
    assert "Request B shares its first **10** tokens" in text and "the same token for token" in text
    assert len(visit.run.steps) == 1  # the run itself is left as it was


def test_picking_an_experiment_shows_its_parameter_boxes_and_its_menu():
    for name, experiment in LAB.items():
        *boxes, menu, what = handlers.on_lab_select(name)
        shown = [box for box in boxes if box["visible"]]
        numbers = [param for param in experiment.params if not param.choices]
        assert [box["label"] for box in shown] == [param.label for param in numbers]
        assert [box["value"] for box in shown] == [param.default for param in numbers]
        assert what == experiment.what and len(boxes) == handlers.LAB_PARAM_SLOTS
        choice = next((param for param in experiment.params if param.choices), None)
        assert menu["visible"] == (choice is not None)
        if choice is not None:  # a menu of names, its default picked
            assert menu["choices"] == list(choice.names) and menu["value"] == choice.name_of(choice.default)


def test_a_menu_choice_reaches_the_experiment_by_its_name(served):
    visit = prefilled(served)
    _, text = handlers.on_lab_click(visit, "kvquant", 2, 12, choice="int8")
    assert "**int8**" in text and "fp8 e4m3" not in text
    assert [variant.name for variant in visit.lab[1].variants][1:] == ["int8"]
    with pytest.raises(gr.Error, match="KV-cache format must be one of both, int8, fp8-e4m3"):
        handlers.on_lab_click(visit, "kvquant", 2, 12, choice="int4")


@pytest.mark.parametrize("value,message", [(-1, "must be 0 to 2048, not -1"), (2.5, "must be a whole number"),
                                           (40, "shared prefix must be 1 to 25")])
def test_a_bad_parameter_is_a_toast_and_the_session_stays(served, value, message):
    visit = prefilled(served)
    with pytest.raises(gr.Error, match=message):
        handlers.on_lab_click(visit, "prefix", value)
    assert visit.open and len(visit.run.steps) == 1


def test_no_run_or_an_unknown_experiment_is_refused(served):
    with pytest.raises(gr.Error, match="Run a prefill first"):
        handlers.on_lab_click(None, "prefix")
    with pytest.raises(gr.Error, match="Unknown experiment 'nope': pick one of prefix"):
        handlers.on_lab_click(prefilled(served), "nope")


def test_hosted_mode_caps_each_parameter_at_its_hosted_maximum(model):
    served = Served.create(ModelRegistry(model), dataclasses.replace(HOSTED, allowed_models=()))
    visit = prefilled(served)
    capped = 0
    for name, experiment in LAB.items():
        for slot, param in enumerate(handlers.number_params(experiment)):
            if param.hosted_maximum is not None and param.hosted_maximum < param.maximum:
                values = [None] * handlers.LAB_PARAM_SLOTS
                values[slot] = param.hosted_maximum + 1
                with pytest.raises(gr.Error, match=f"to {param.hosted_maximum} here"):
                    handlers.on_lab_click(visit, name, *values)
                capped += 1
    assert capped >= 4  # requests, chunk size, tokens to generate, ...


def test_presenter_mode_redraws_the_latest_experiment_larger(served):
    visit = prefilled(served)
    assert handlers.lab_figure(visit, True).layout.meta == {"view": "lab", "step": None}  # none ran yet
    handlers.on_lab_click(visit, "prefix", 10)
    normal, presenter = handlers.lab_figure(visit, False), handlers.lab_figure(visit, True)
    assert normal.layout.meta == presenter.layout.meta == {"view": "lab-prefix", "step": None}
    assert presenter.layout.font.size > normal.layout.font.size


def test_presenter_mode_wraps_the_title_for_its_larger_text_and_moves_the_legend_below_it(served):
    from explorer.figures.lab.frame import TITLE_CHARS
    from explorer.figures.theme import PRESENTER_SCALE, TITLE_LINE_PX

    visit = prefilled(served)
    handlers.on_lab_click(visit, "evict", 12, 3, 40)
    normal, presenter = handlers.lab_figure(visit, False), handlers.lab_figure(visit, True)
    before, after = normal.layout.title.text.split("<br>"), presenter.layout.title.text.split("<br>")
    assert " ".join(after) == " ".join(before)  # the same words, in more lines
    assert len(after) > len(before) and max(map(len, after)) <= TITLE_CHARS / PRESENTER_SCALE
    # every band below the title moved down by its added lines, at the presenter's scale
    added_px = presenter.layout.margin.t - round(normal.layout.margin.t * PRESENTER_SCALE)
    assert added_px >= round(TITLE_LINE_PX * PRESENTER_SCALE * (len(after) - len(before)))
    legend_top_px = (1 - presenter.layout.legend.y) * presenter.layout.height
    assert legend_top_px > TITLE_LINE_PX * PRESENTER_SCALE * len(after)  # the legend starts under the title


class Progress:
    """What the handler sees of `gr.Progress`: the descriptions shown on the page's status line."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def __call__(self, fraction, desc: str | None = None, **_) -> None:
        self.shown.append(desc)


def test_a_waiting_experiment_counts_the_turns_ahead_of_its_next_pass_and_a_kept_result_says_so(served):
    import threading

    from explorer.runner.locks import model_lock
    from explorer.ui.handlers.turns import waiting_text

    visit, progress, drawn = prefilled(served), Progress(), []
    lock = model_lock(visit.session.loaded.model)
    lock.acquire()  # another page's step in flight
    page = threading.Thread(target=lambda: drawn.append(
        handlers.on_lab_click(visit, "evict", 8, 2, 24, progress=progress)))
    page.start()
    while not progress.shown:
        assert page.is_alive()
    lock.release()
    page.join(120)
    assert progress.shown[0] == waiting_text(1, "passes")
    assert waiting_text(1, "passes").endswith("1 turn ahead of this experiment's next pass")
    assert "cached: computed at" not in drawn[0][1]
    _, again = handlers.on_lab_click(prefilled(served), "evict", 8, 2, 24)  # another page, the same parameters
    assert "*cached: computed at" in again and "for this model, these parameters" in again
