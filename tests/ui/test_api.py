"""The app's API as a `gradio_client` user sees it: exactly the seven intended endpoints, each parameter
named, described and typed as what it is, every output labelled and a plain value, every other event
private; and the documentation's example (docs/api.md) run against it."""

from __future__ import annotations

from pathlib import Path

import plotly.io as pio
import pytest
from docs_code import doc_python
from served_app import build_app, serving
from tiny_models import tiny_model

from explorer.notebook import Explorer
from explorer.ui.hosting import LOCAL

SAMPLING = ["do_sample", "temperature", "top_k", "top_p", "min_p", "seed", "max_new_tokens"]
VIEW = ["layer", "average_heads", "hardware", "presenter", "zoom"]
ENDPOINTS = {
    "/prefill": ["model", "custom_model", "prompt", "prompt_tokens", "use_chat_template", "system_prompt",
                 "enable_thinking", "batch_lines", "lm_head_all", *SAMPLING, *VIEW],
    "/decode": [*SAMPLING, *VIEW],
    "/run": ["count", *SAMPLING, *VIEW],
    "/reset": [],
    "/figure": ["view", "step", "layer", "average_heads", "hardware", "zoom", "presenter"],
    "/export": [],
    "/lab": ["name", "first", "second", "third", "fourth", "choice", "presenter"],
}


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def test_the_api_lists_exactly_the_intended_endpoints_with_named_parameters(model):
    from gradio_client import Client

    with serving(model, LOCAL) as (url, _):
        client = Client(url, verbose=False)
        try:
            api = client.view_api(print_info=False, return_format="dict")
        finally:
            client.close()
    assert api["unnamed_endpoints"] == {}
    assert {name: [p["parameter_name"] for p in endpoint["parameters"]]
            for name, endpoint in api["named_endpoints"].items()} == ENDPOINTS
    for name, endpoint in api["named_endpoints"].items():
        assert len(endpoint["description"]) > 40, name
        # every output is described by its label (Gradio names an unlabelled one "value_<id>")
        assert not [r["label"] for r in endpoint["returns"] if r["label"].startswith("value_")], name


# What each parameter is: a whole number where the app takes one, whatever control the page shows it in.
WHOLE = {"top_k", "seed", "max_new_tokens", "layer", "zoom", "count", "prompt_tokens", "first", "second", "third",
         "fourth", "step"}
STEP_RETURNS = ["str", "str", "str", "int", "int", *["dict(type: Literal['altair', 'bokeh', 'plotly', 'matplotlib'], "
                                                       "plot: str)"] * 7]


def test_every_parameter_is_described_and_typed_and_every_step_returns_plain_values(model):
    from gradio_client import Client

    with serving(model, LOCAL) as (url, _):
        client = Client(url, verbose=False)
        try:
            api = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
            prefill = client.predict(prompt="Hello", use_chat_template=False, api_name="/prefill")
            decode = client.predict(zoom=2, layer=1, top_k=5, api_name="/decode")
            run = client.predict(count=2, api_name="/run")
            figure = client.predict(view="kv_cache", zoom=None, api_name="/figure")
            reset = client.predict(api_name="/reset")
        finally:
            client.close()
    for name, endpoint in api.items():
        for parameter in endpoint["parameters"]:
            assert f"`{parameter['parameter_name']}`: " in endpoint["description"], (name, parameter)
            if parameter["parameter_name"] in WHOLE:
                assert parameter["python_type"]["type"] in ("int", "None | int"), (name, parameter)
        assert "Any" not in [r["python_type"]["type"] for r in endpoint["returns"]], name
    for name in ("/prefill", "/decode", "/run", "/reset"):
        assert [r["python_type"]["type"] for r in api[name]["returns"]] == STEP_RETURNS, name
    assert [r["python_type"]["type"] for r in api["/figure"]["returns"]] == ["str"]
    assert {p["python_type"]["type"] for e in api.values() for p in e["parameters"] if p["parameter_name"] == "zoom"} \
        == {"int", "None | int"}
    for outputs, step, layer in ((prefill, 0, 0), (decode, 1, 1), (run, 3, 0), (reset, None, None)):
        assert not [o for o in outputs if isinstance(o, dict) and "__type__" in o]  # no update of a page's control
        assert outputs[3:5] == (step, layer)
    assert pio.from_json(figure).layout.meta == {"view": "kv_cache", "step": 3}
    assert isinstance(decode[5], dict) and decode[6:] == (None,) * 6  # the forward pass drawn; no other view


def test_every_other_event_is_private(model):
    demo, _ = build_app(model, LOCAL)
    visible = {fn.api_name for fn in demo.fns.values() if fn.fn is not None and fn.api_visibility != "private"}
    assert {f"/{name}" for name in visible} == set(ENDPOINTS)  # none merely "undocumented" (still callable)


def test_the_documented_example_runs_against_the_app(model, tmp_path, monkeypatch):
    code = doc_python("docs/api.md")
    assert 'Client("http://127.0.0.1:7860/")' in code
    monkeypatch.chdir(tmp_path)
    with serving(model, LOCAL) as (url, served):
        names = {}
        exec(compile(code.replace("http://127.0.0.1:7860/", url), "docs/api.md", "exec"), names)  # noqa: S102
        names["client"].close()
        assert len(served.live) == 0  # /reset freed the session
    figure = names["figure"]
    assert figure.layout.meta == {"view": "attention", "step": 3}
    page = Path("attention.html").read_text(encoding="utf-8")
    assert "<script src=" not in page and len(page) > 3_000_000  # plotly.js inlined: opens offline
    assert pio.from_json(figure.to_json()).layout.meta == figure.layout.meta
    saved = Explorer.open(names["run_file"])
    assert len(saved.run.steps) == 4 and saved.text == names["text"]
    assert names["lesson"].startswith("**Prefix caching.** Request B shares its first")
