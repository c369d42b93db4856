"""Lecture mode on a tiny model: runs saved as JSON and shown again with no model, shareable
links, and deterministic replay (same seed, same tokens)."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, quote_plus

import gradio as gr
import numpy as np
import pytest
from tiny_models import tiny_model

from explorer.config import SamplingSettings
from explorer.figures.views import VIEWS, ViewOptions
from explorer.runner.session import InferenceSession
from explorer.saved import FORMAT, load_run, save_run
from explorer.ui import handlers
from explorer.ui.hosting import LOCAL, Served
from explorer.ui.links import LINK_FIELDS, query_string, values_from_query
from explorer.ui.models import ModelRegistry
from explorer.ui.views import Visit, render

SAMPLED = (True, 0.9, 20, 0.95, 0.0, 5, 16)
VIEW = (0, False, "h100-sxm", "attention")


class FakeRequest:
    def __init__(self, session_hash="page", query=None):
        self.session_hash, self.query_params = session_hash, query or {}


@pytest.fixture(scope="module")
def served():
    return Served.create(ModelRegistry(tiny_model("llama")), LOCAL)


def run(served, steps=2, sampling=SAMPLED, page="page"):
    visit, *_ = handlers.ServedHandlers(served).on_prefill_click(FakeRequest(page), None, served.registry.default_choice, "", "Hello there", 17, False, "", False, False, False,
                                          *sampling, *VIEW)
    for _ in range(steps):
        handlers.on_decode_click(visit, *sampling, *VIEW)
    return visit


def test_an_exported_run_shows_every_view_again_with_no_model(served):
    live = run(served)
    path = handlers.on_export_click(live)
    data = json.loads(open(path, encoding="utf-8").read())
    assert data["format"] == FORMAT and len(data["traces"]) == 3 and data["ids"] == live.run.ids
    outputs = handlers.ServedHandlers(served).on_import_upload(FakeRequest("other"), path, *VIEW)
    saved = outputs[0]
    assert saved.run.text == live.run.text and saved.run.description == live.run.description
    assert outputs[1].startswith("a saved run, shown without the model: ")
    for step in range(3):
        for view in VIEWS:
            _, live_figure = handlers.on_tab_select(view)(live, step, 0, False, "h100-sxm")
            _, saved_figure = handlers.on_tab_select(view)(saved, step, 0, False, "h100-sxm")
            assert saved_figure.layout.meta == live_figure.layout.meta == {"view": view, "step": step}
            if view in ("attention", "sampling"):
                assert saved_figure.to_json() == live_figure.to_json()  # the same values drawn
    np.testing.assert_array_equal(saved.attention.probs(2, 0), live.attention.probs(2, 0))


def test_a_reloaded_run_draws_what_the_live_run_drew_after_its_budget_dropped_matrices(served, tmp_path):
    session = InferenceSession(served.registry.get(served.registry.default_choice, ""),
                               SamplingSettings(do_sample=True, seed=3, max_new_tokens=8), attention_budget_bytes=24_000)
    session.prefill("Hello there, how are you?", use_chat_template=False)
    for _ in range(3):
        session.decode_step()
    live = Visit.start(session, LOCAL)
    n_layers = len(live.run.steps[0].attention)
    kept = [session.attention.store.kept(step, layer) for step in range(4) for layer in range(n_layers)]
    assert any(kept) and not all(kept)  # the budget dropped the prefill's matrices, kept the newest rows
    saved = Visit.replay(*load_run(save_run(live.run, live.attention, tmp_path / "run.json")), LOCAL)
    for step in range(4):
        for layer in range(n_layers):
            for view in VIEWS:
                options = ViewOptions(step, layer, False, "h100-sxm")
                assert render(saved, options, view).to_json() == render(live, options, view).to_json(), (step, layer, view)


def test_a_saved_run_cannot_take_a_step(served):
    saved = handlers.ServedHandlers(served).on_import_upload(None, handlers.on_export_click(run(served, steps=0)), *VIEW)[0]
    with pytest.raises(gr.Error, match="saved run: there is no model"):
        handlers.on_decode_click(saved, *SAMPLED, *VIEW)


def test_a_file_that_is_not_a_saved_run_is_an_error_message(served, tmp_path):
    for content, message in (("not json", "Cannot read the saved run"), ('{"format": "x"}', "Not a saved run"),
                             (json.dumps({"format": FORMAT, "traces": []}), "incomplete or damaged")):
        path = tmp_path / "run.json"
        path.write_text(content)
        with pytest.raises(gr.Error, match=message):
            handlers.ServedHandlers(served).on_import_upload(None, str(path), *VIEW)


def test_same_seed_same_tokens_other_seed_other_tokens(served):
    first, again = run(served, steps=6, page="a"), run(served, steps=6, page="b")
    other = run(served, steps=6, sampling=(*SAMPLED[:5], 6, 16), page="c")
    assert first.run.ids == again.run.ids
    assert first.run.ids != other.run.ids


def test_a_link_round_trips_the_settings():
    values = {"prompt": "Hi & bye?", "model_choice": "shape-only: qwen3-8b", "custom_model": "",
              "use_chat_template": False, "system_prompt": "Be brief.", "do_sample": True, "temperature": 0.7,
              "top_k": 40, "top_p": 0.9, "min_p": 0.05, "seed": 3, "max_new_tokens": 32}
    query = query_string(values)
    assert query.startswith("?prompt=Hi+%26+bye%3F&model=shape-only")
    read, unreadable = values_from_query(dict(parse_qsl(query[1:])))
    assert unreadable == [] and read == {k: v for k, v in values.items() if v != ""}


def test_unreadable_link_values_are_named_and_ignored():
    read, unreadable = values_from_query({"temperature": "nan", "seed": "abc", "sample": "maybe", "top_k": "5",
                                          "evil": "x", "min_p": "5", "max_new_tokens": "0", "top_p": "0.5"})
    assert read == {"top_k": 5, "top_p": 0.5}
    assert sorted(unreadable) == ["max_new_tokens", "min_p", "sample", "seed", "temperature"]


def test_share_and_load_fill_the_controls(served):
    link = handlers.on_share_click("Hi", served.registry.default_choice, "", True, "", True, True, 0.7, 40, 0.9, 0.0, 3,
                                   32)
    assert link.startswith("?prompt=Hi&model=" + quote_plus(served.registry.default_choice) + "&chat=1&thinking=1&sample=1")
    assert "temperature=0.7" in link and "custom_model" not in link
    query = {"prompt": "Bonjour", "temperature": "1.3", "model": "../../etc"}
    with pytest.warns(UserWarning, match="model could not be used"):
        filled = handlers.ServedHandlers(served).on_page_load(FakeRequest(query=query))
    *filled, prefill = filled
    values = dict(zip(LINK_FIELDS, filled, strict=True))
    assert prefill == gr.update(interactive=True)  # the page starts with Prefill disabled until then
    assert values["prompt"] == "Bonjour" and values["temperature"] == 1.3
    assert values["model_choice"] == gr.skip() and values["seed"] == gr.skip()


def test_loading_a_saved_run_restores_the_prompt_and_sampling_controls(served):
    live = run(served, sampling=(True, 0.7, 12, 0.85, 0.05, 9, 8))
    outputs = handlers.ServedHandlers(served).on_import_upload(FakeRequest("other"), handlers.on_export_click(live), *VIEW)
    restored = dict(zip(handlers.RESTORED_INPUTS, outputs[handlers.STEP_OUTPUTS:], strict=True))
    assert restored == {"prompt": "Hello there", "prompt_tokens": gr.skip(), "use_chat_template": False,
                        "system_prompt": "", "enable_thinking": False, "do_sample": True, "temperature": 0.7, "top_k": 12, "top_p": 0.85,
                        "min_p": 0.05, "seed": 9, "max_new_tokens": 8}
