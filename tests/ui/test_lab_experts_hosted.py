"""The expert-parallel experiment in the app: hosted, it is refused with a message saying it runs
locally only (no process is started); locally, an R that does not divide the experts is a toast naming E."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from explorer.lab.table import LAB
from explorer.runner.lab import experts as experts_runner
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
    monkeypatch.setattr(experts_runner, "start_ranks", lambda *args: pytest.fail("a process was started"))


def test_hosted_mode_refuses_it_saying_it_runs_locally(model, no_process):
    served = Served.create(ModelRegistry(model), dataclasses.replace(HOSTED, allowed_models=()))
    visit = prefilled(served)
    with pytest.raises(gr.Error, match=r"runs locally only, not on this shared app: `llm-explorer lab experts PROMPT`"):
        handlers.on_lab_click(visit, "experts", 2, 4)
    assert visit.open and LAB["experts"].local_only and "Runs locally only" in LAB["experts"].what


def test_locally_an_r_that_does_not_divide_e_is_a_toast_naming_it(served, no_process):
    with pytest.raises(gr.Error, match=r"3 does not divide 8\. On this model R can be 1, 2, 4, 8\."):
        handlers.on_lab_click(prefilled(served), "experts", 3, 4)
