"""The pipeline-parallel experiment in the app: hosted, it is refused with a message saying it runs
locally only (no process is started); locally, an S above the model's L layers is a toast naming L."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from explorer.lab.table import LAB
from explorer.runner.lab import pipeline as pipeline_runner
from explorer.ui import handlers
from explorer.ui.hosting import HOSTED, Served
from explorer.ui.models import ModelRegistry

GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)
VIEW = (0, False, "h100-sxm", "forward")


def prefilled(served):
    return handlers.ServedHandlers(served).on_prefill_click(
        None, None, served.registry.default_choice, "", "Hello there, how are you?", 17, False, "", False, False,
        False, *GREEDY, *VIEW)[0]


@pytest.fixture
def no_process(monkeypatch):
    monkeypatch.setattr(pipeline_runner, "start_ranks", lambda *args, **kwargs: pytest.fail("a process was started"))


def test_hosted_mode_refuses_it_saying_it_runs_locally(model, no_process):
    served = Served.create(ModelRegistry(model), dataclasses.replace(HOSTED, allowed_models=()))
    visit = prefilled(served)
    with pytest.raises(gr.Error, match=r"runs locally only, not on this shared app: `llm-explorer lab pipeline "
                                       r"PROMPT`"):
        handlers.on_lab_click(visit, "pipeline", 2, 2)
    assert visit.open and LAB["pipeline"].local_only and "Runs locally only" in LAB["pipeline"].what


def test_locally_an_s_above_l_is_a_toast_naming_l(served, no_process):
    with pytest.raises(gr.Error, match=r"S must be 1 to L = 3, not 4\."):
        handlers.on_lab_click(prefilled(served), "pipeline", 4, 2)
