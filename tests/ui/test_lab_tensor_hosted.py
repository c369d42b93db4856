"""The tensor-parallel experiment in the app: hosted, it is refused with a message saying it runs
locally only (no process is started); locally, an R that does not divide is a toast naming the
dimension."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from explorer.lab.table import LAB
from explorer.runner.lab import tensor as tensor_runner
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
    monkeypatch.setattr(tensor_runner, "start_ranks", lambda *args: pytest.fail("a process was started"))


def test_hosted_mode_refuses_it_saying_it_runs_locally(model, no_process):
    served = Served.create(ModelRegistry(model), dataclasses.replace(HOSTED, allowed_models=()))
    visit = prefilled(served)
    with pytest.raises(gr.Error, match=r"runs locally only, not on this shared app: `llm-explorer lab tensor PROMPT`"):
        handlers.on_lab_click(visit, "tensor", 1, 4)
    assert visit.open and LAB["tensor"].local_only and "Runs locally only" in LAB["tensor"].what


def test_locally_an_r_that_does_not_divide_is_a_toast_naming_the_dimension(served, no_process):
    with pytest.raises(gr.Error, match=r"2 does not divide the MLP width d_ff \(37\)\. On this model R can be 1\."):
        handlers.on_lab_click(prefilled(served), "tensor", 2, 4)
