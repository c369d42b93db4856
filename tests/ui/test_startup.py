"""Start-up: the page is served while the start-up model still loads, an event that runs the model
waits for the load and then runs, a load that fails reaches the visitor as a message, and the app's
UI modules import no torch (so the page does not wait for it)."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace

import gradio as gr
import httpx
import pytest
from served_app import PlainClient, build_app, serving, status_of
from tiny_models import tiny_model

from explorer.errors import ModelLoadError
from explorer.runner.loading import load_shape_only
from explorer.ui.hosting import HOSTED, LOCAL, Served
from explorer.ui.models import ModelRegistry
from explorer.ui.plain import markdown_text
from explorer.ui.startup import LOADING, ModelFacts, PendingModel, on_model_ready, prompt_label
from explorer.ui.wiring import MODEL_QUEUE

GATE_TIMEOUT_S = 60  # a load the test never opens ends the test instead of hanging it


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def loading(model, gate: threading.Event, error: BaseException | None = None) -> PendingModel:
    """The start-up load of `model` (as `python app.py` makes it), blocked until `gate` is set; then
    it returns the model or raises `error`."""
    def load():
        if not gate.wait(GATE_TIMEOUT_S):
            raise TimeoutError("the test never opened the load")
        if error is not None:
            raise error
        return model

    pending = PendingModel(ModelFacts.expected(model.name), load)
    pending.start()
    return pending


def test_the_page_is_served_while_the_model_loads_and_a_prefill_waits_then_runs(model):
    gate = threading.Event()
    pending = loading(model, gate)
    with serving(pending, LOCAL) as (url, _):
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200 and not pending.done()
        client = PlainClient(url)
        try:
            assert client.join("prefill").status_code == 200  # queued while the model loads
            assert not pending.done()
            gate.set()
            (message,) = client.results()
        finally:
            client.close()
    assert message["success"], status_of(message)
    assert "prefill" in status_of(message).lower()  # the step's status line, its prompt run on the model


@pytest.mark.parametrize("error, reason", [
    (ModelLoadError("No weights in /models/x."), "No weights in /models/x."),
    (RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\n(a long trace)"),
     "CUDA out of memory. Tried to allocate 2 GiB"),
])
def test_a_load_that_fails_reaches_the_visitor_as_a_message(model, error, reason):
    gate = threading.Event()
    gate.set()
    pending = loading(model, gate, error)
    with serving(pending, LOCAL) as (url, _):
        client = PlainClient(url)
        try:
            message = client.call("prefill")
        finally:
            client.close()
    assert status_of(message) == f"error: The model {model.name} could not be loaded: {reason}"
    status, model_menu, *_ = on_model_ready(pending)  # the page's status line
    said = f"The model {model.name} could not be loaded: {reason}"
    assert status == f"**Error:** {markdown_text(said)}" and model_menu["info"] == said


def test_the_page_follows_the_model_once_it_is_loaded(model):
    gate = threading.Event()
    pending = loading(model, gate)
    served = Served.create(ModelRegistry(pending), LOCAL)
    assert served.registry.facts == ModelFacts(model.name, False, True, LOADING)  # no layer count yet
    threading.Timer(0.2, gate.set).start()  # the page's event waits for the load
    status, model_menu, layer, hardware, *prompt = on_model_ready(pending)
    assert status.startswith("**Model loaded:**") and model_menu["info"] == model.description
    assert layer["maximum"] == model.model.config.num_hidden_layers - 1 and hardware == "this-machine"
    assert prompt == [gr.skip()] * 5  # a text model, as expected: the prompt's controls stay
    assert served.registry.get(served.registry.default_choice) is model


def test_a_model_without_the_expected_tokenizer_swaps_the_prompt_for_its_length(model):
    untokenized = replace(model, tokenizer=None)  # a real model's folder without a tokenizer
    pending = PendingModel(ModelFacts.expected(model.name), lambda: untokenized)
    pending.start()
    *_, label, length, chat, system, thinking = on_model_ready(pending)
    assert label["label"] == prompt_label(False) and length["visible"] is True
    assert [chat["visible"], system["visible"], thinking["visible"]] == [False] * 3


def test_a_shape_only_preset_is_expected_as_it_loads():
    expected, loaded = ModelFacts.expected(config="gpt2"), ModelFacts.of(load_shape_only("gpt2"))
    assert (expected.name, expected.shape_only, expected.takes_text) == (loaded.name, True, False)


def test_the_expected_facts_are_those_of_the_loaded_embedded_model(embedded_model):
    expected, loaded = ModelFacts.expected(), ModelFacts.of(embedded_model)
    assert (expected.name, expected.shape_only, expected.takes_text) == (loaded.name, False, True)


def test_the_app_modules_import_no_torch():
    code = ("import sys, explorer.ui.launch, explorer.ui.layout; "
            "print(sorted({'torch', 'transformers'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_the_page_s_wait_for_the_model_is_not_a_model_event(model):
    """Hosted mode caps a page's queued model events (2): the page's wait for the load must not take
    one of them, or a Prefill pressed during the load would be refused."""
    gate = threading.Event()
    demo, _ = build_app(loading(model, gate), HOSTED)
    gate.set()
    (ready,) = [fn for fn in demo.fns.values() if getattr(fn.fn, "func", None) is on_model_ready]
    assert ready.concurrency_id != MODEL_QUEUE and ready.concurrency_limit is None
