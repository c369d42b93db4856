"""A CLI trace saved with `--json` is a saved run: it opens in the app (the upload handler) and with
`Explorer.open`, and every view of every step draws the figure the live run drew."""

from __future__ import annotations

import pytest
from tiny_models import tiny_model

from explorer.cli import main
from explorer.figures.views import VIEWS, ViewOptions
from explorer.notebook import Explorer
from explorer.runner import session as session_module
from explorer.ui import handlers
from explorer.ui.hosting import LOCAL, Served
from explorer.ui.models import ModelRegistry
from explorer.ui.views import Visit, render

VIEW = (0, False, "h100-sxm", "attention")


class FakeRequest:
    session_hash, query_params = "page", {}


@pytest.fixture
def cli_run(tmp_path, monkeypatch):
    """(the CLI's live session, the file it wrote): a sampled trace of the tiny Llama, 3 decode steps."""
    model, sessions = tiny_model("llama"), []

    class Recorded(session_module.InferenceSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sessions.append(self)

    monkeypatch.setattr("explorer.runner.loading.load", lambda **kwargs: model)
    monkeypatch.setattr(session_module, "InferenceSession", Recorded)
    path = tmp_path / "trace.json"
    argv = ["trace", "Hello there", "--steps", "3", "--no-chat-template", "--temperature", "0.8", "--seed", "4",
            "--json", str(path)]
    assert main(argv) == 0
    return sessions[0], path, model


def test_a_cli_trace_opens_in_the_app_and_the_notebook_drawing_the_live_figures(cli_run):
    session, path, model = cli_run
    live = Visit.start(session, LOCAL)
    assert [step.stage for step in live.run.steps] == ["prefill", "decode", "decode", "decode"]
    uploaded = handlers.ServedHandlers(Served.create(ModelRegistry(model), LOCAL)).on_import_upload(
        FakeRequest(), str(path), *VIEW)[0]
    notebook = Explorer.open(path)
    assert uploaded.saved and uploaded.run.ids == live.run.ids and notebook.run.text == live.run.text
    for step in range(len(live.run.steps)):
        for layer in (0, 1):
            options = ViewOptions(step, layer, False, "h100-sxm")
            for view in VIEWS:
                drawn = render(live, options, view).to_json()
                assert render(uploaded, options, view).to_json() == drawn, (step, layer, view)
                assert notebook.figure(view, step, layer, hardware="h100-sxm").to_json() == drawn, (step, layer, view)
