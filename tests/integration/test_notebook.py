"""The notebook front end, `explorer.Explorer`: a thin layer over the session, the views and the saved
runs, giving the app's figures; the documentation's example (docs/notebook.md) run on the embedded model."""

from __future__ import annotations

import subprocess
import sys

import plotly.graph_objects as go
import pytest
from docs_code import doc_python
from tiny_models import tiny_model

from explorer.config import SamplingSettings
from explorer.errors import ConfigError, SessionStateError
from explorer.figures.views import VIEWS
from explorer.notebook import Explorer
from explorer.ui.handlers import on_tab_select
from explorer.ui.hosting import LOCAL
from explorer.ui.views import Visit

SAMPLED = SamplingSettings(do_sample=True, temperature=0.9, top_k=20, seed=3)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def explored(model):
    explorer = Explorer(model, SAMPLED)
    explorer.prefill("Notebooks draw what the app draws.")
    explorer.decode(3)
    return explorer


def test_import_explorer_loads_neither_torch_nor_gradio_nor_plotly():
    code = ("import sys, explorer\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'transformers', 'gradio', 'plotly')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_every_view_is_the_figure_the_app_draws_for_the_same_step(explored):
    visit = Visit.start(explored._session, LOCAL)
    for view in VIEWS:
        # the app's tab handler: step 2, layer 1, heads averaged, this machine's roofline
        _, drawn = on_tab_select(view)(visit, 2, 1, True, "this-machine")
        assert explored.figure(view, step=2, layer=1, average_heads=True).to_json() == drawn.to_json(), view


def test_a_saved_run_opens_with_the_same_figures_and_no_model(explored, tmp_path):
    path = explored.save(tmp_path / "run.json")
    saved = Explorer.open(path)
    assert saved.text == explored.text and [s.input_ids for s in saved.run.steps] == [
        s.input_ids for s in explored.run.steps]
    for view in VIEWS:
        for step in (0, 3):
            assert saved.figure(view, step=step, layer=2).to_json() == \
                explored.figure(view, step=step, layer=2).to_json(), (view, step)
    with pytest.raises(SessionStateError, match="saved run"):
        saved.prefill("no model here")


def test_decode_stops_where_generation_ends_and_sampling_can_change(model):
    explorer = Explorer(model, SamplingSettings(max_new_tokens=3))
    explorer.prefill("Three tokens at most")  # the prefill chooses the first
    assert [trace.step_index for trace in explorer.decode(5)] == [1, 2]
    with pytest.raises(SessionStateError):
        explorer.decode()
    explorer.prefill("Then sampled")
    (trace,) = explorer.decode(temperature=0.5, do_sample=True)
    assert trace.sampling.settings["temperature"] == 0.5 and explorer.settings.do_sample


def test_bad_requests_say_what_to_do(model, explored):
    with pytest.raises(SessionStateError, match="prefill"):
        Explorer(model).figure("forward")
    with pytest.raises(ConfigError, match="pick one of forward, journey"):
        explored.figure("heatmap")
    with pytest.raises(ConfigError, match="steps 0 to 3 and layers 0 to 2"):
        explored.figure("attention", step=4)
    with pytest.raises(ConfigError, match="whole number >= 1"):
        explored.decode(0)


def test_a_config_alone_gives_the_shape_only_views():
    explorer = Explorer.load(config="qwen3-0.6b")
    trace = explorer.prefill(prompt_tokens=7)
    assert trace.shape_only and trace.op("layers.0.attn.q_proj").output_shapes == [[1, 7, 2048]]
    assert "Shape-only" in explorer.figure("attention").layout.annotations[0].text


@pytest.mark.real_model
def test_the_documented_example_runs_on_the_embedded_model(embedded_model, embedded_cache_dir, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr(go.Figure, "show", lambda figure, *args, **kwargs: shown.append(figure.layout.meta))
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(embedded_cache_dir))  # converted there by `embedded_model`
    monkeypatch.chdir(tmp_path)
    names = {}
    exec(compile(doc_python("docs/notebook.md"), "docs/notebook.md", "exec"), names)  # noqa: S102
    assert "Paris" in names["ex"].text
    assert [(meta["view"], meta["step"]) for meta in shown] == [("attention", 1), ("kv_cache", 3), ("forward", 0)]
    assert (tmp_path / "attention.html").stat().st_size > 3_000_000 and (tmp_path / "run.json").exists()


def test_the_repr_says_the_run_at_a_glance(model, explored, tmp_path):
    assert repr(Explorer(model)) == "Explorer(model='tiny-llama', no run yet: call prefill(...))"
    run = explored.run
    assert repr(explored) == (f"Explorer(model='tiny-llama', prefill + 3 decode steps, {len(run.steps[0].input_ids)} "
                              f"in the prompt, 4 chosen, context n = {run.steps[-1].context_length}, text={run.text!r})")
    saved = Explorer.open(explored.save(tmp_path / "run.json"))
    assert repr(saved).startswith("Explorer(saved run of model='tiny-llama', prefill + 3 decode steps, ")


def test_the_notebook_table_has_a_row_per_step_and_escapes_every_text(model, monkeypatch):
    from explorer import run_summary

    explorer = Explorer(model)
    explorer.prefill("<b>bold</b> & <script>", use_chat_template=False)
    explorer.decode(3)
    page = explorer._repr_html_()
    assert "<script>" not in page and "<b>bold" not in page and "&lt;script&gt;" in page
    rows = [row for row in page.split("<tr>") if row.startswith("<td>")]
    assert [row.split("</td>")[0] for row in rows] == ["<td>prefill", "<td>step 1", "<td>step 2", "<td>step 3"]
    for row, trace in zip(rows, explorer.run.steps, strict=True):
        cells = [cell.removeprefix("<td>") for cell in row.split("</td>")[:6]]
        assert cells[1:3] == [str(len(trace.input_ids)), str(trace.context_length)]
        assert cells[4] == f"{trace.sampling.token_prob:.3f}" and cells[5] == f"{trace.wall_ms:.1f}"
    monkeypatch.setattr(run_summary, "MAX_ROWS", 2)
    assert "… 2 earlier steps" in explorer._repr_html_()


def test_a_shape_only_run_shows_no_probability_nor_time():
    explorer = Explorer.load(config="qwen3-0.6b")
    explorer.prefill(prompt_tokens=5)
    page = explorer._repr_html_()
    assert "5 tokens (shape-only)" in page and "<td>–</td><td>–</td>" in page


def test_the_package_names_what_it_exports():
    import explorer

    assert explorer.__all__ == ["Explorer"] and explorer.Explorer is Explorer
