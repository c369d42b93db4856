"""The lab's multi-process experiments (tensor, pipeline and expert parallelism) in the app: hosted,
each is refused with a message saying it runs locally only (no process is started); locally, a count
of processes that does not split the model is a toast naming what it must divide."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from explorer.lab.table import LAB
from explorer.runner.lab import experts, pipeline, tensor
from explorer.ui import handlers
from explorer.ui.hosting import HOSTED, Served
from explorer.ui.models import ModelRegistry

GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)
VIEW = (0, False, "h100-sxm", "forward")
# name: (its runner's module, parameters that run, parameters refused locally, the refusal's words)
LOCAL_ONLY = {
    "tensor": (tensor, (1, 4), (2, 4), r"2 does not divide the MLP width d_ff \(37\)\. On this model R can be 1\."),
    "pipeline": (pipeline, (2, 2), (4, 2), r"S must be 1 to L = 3, not 4\."),
    "experts": (experts, (2, 4), (3, 4), r"3 does not divide 8\. On this model R can be 1, 2, 4, 8\."),
}


def prefilled(served):
    return handlers.ServedHandlers(served).on_prefill_click(
        None, None, served.registry.default_choice, "", "Hello there, how are you?", 17, False, "", False, False,
        False, *GREEDY, *VIEW)[0]


@pytest.fixture(params=list(LOCAL_ONLY))
def name(request, monkeypatch):
    """An experiment's name, with its runner unable to start a process."""
    monkeypatch.setattr(LOCAL_ONLY[request.param][0], "start_ranks",
                        lambda *args, **kwargs: pytest.fail("a process was started"))
    return request.param


def test_every_experiment_that_starts_processes_is_marked_local_only():
    assert {name for name, experiment in LAB.items() if experiment.local_only} == set(LOCAL_ONLY)


def test_hosted_mode_refuses_it_saying_it_runs_locally(model, name):
    served = Served.create(ModelRegistry(model), dataclasses.replace(HOSTED, allowed_models=()))
    visit = prefilled(served)
    with pytest.raises(gr.Error, match=rf"runs locally only, not on this shared app: `llm-explorer lab {name} PROMPT`"):
        handlers.on_lab_click(visit, name, *LOCAL_ONLY[name][1])
    assert visit.open and "Runs locally only" in LAB[name].what


def test_locally_a_count_that_does_not_split_the_model_is_a_toast_naming_it(served, name):
    _, _, refused, words = LOCAL_ONLY[name]
    with pytest.raises(gr.Error, match=words):
        handlers.on_lab_click(prefilled(served), name, *refused)
