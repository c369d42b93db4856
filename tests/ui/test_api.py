"""The app's API as a `gradio_client` user sees it: exactly the seven intended endpoints, each parameter
named, every output labelled, every other event private; and the documentation's example (docs/api.md) run
against it."""

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
    "/lab": ["name", "first", "second", "third", "fourth", "presenter"],
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
