"""A model's context window, resolved per family by `ModelSpec`, reaches every view that shows one.

GPT-2's config names it `n_positions` (1,024 for GPT-2 small), not `max_position_embeddings`: the
roofline's context sweep, the lesson's KV-cache page and the CLI's checks must all read 1,024.
"""

from __future__ import annotations

import json

import pytest

from explorer.analysis.hardware import get_hardware
from explorer.analysis.measured import Scenario
from explorer.analysis.spec import ModelSpec
from explorer.cli import main
from explorer.errors import UsageError
from explorer.figures.view_fetch import roofline_data
from explorer.figures.view_types import ViewOptions, ViewSources
from explorer.figures.views import render
from explorer.lesson import PAGES, LessonInputs, page_text
from explorer.runner.view_services import RUNNER_SERVICES
from explorer.saved import load_run
from tests.figure_goldens import DATA

GPT2_SMALL_POSITIONS = 1024


def gpt2_with_window(folder, positions: int):
    """The tiny GPT-2 golden run (its context is under 64 positions), its config given `positions`."""
    saved = json.loads((DATA / "gpt2.json").read_text())
    saved["config"]["n_positions"] = positions
    path = folder / f"gpt2-{positions}.json"
    path.write_text(json.dumps(saved))
    return load_run(path)


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    """The tiny GPT-2 golden run, its config given GPT-2 small's 1,024 positions."""
    return gpt2_with_window(tmp_path_factory.mktemp("runs"), GPT2_SMALL_POSITIONS)


@pytest.fixture(scope="module")
def gpt2_64(tmp_path_factory):
    """The same run, its config given a 64-position window."""
    return gpt2_with_window(tmp_path_factory.mktemp("runs"), 64)


@pytest.mark.parametrize("config, window", [
    ({"model_type": "gpt2", "n_embd": 48, "n_head": 6, "n_layer": 3, "vocab_size": 97, "n_positions": 1024}, 1024),
    ({"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 97, "intermediate_size": 37, "max_position_embeddings": 8192}, 8192),
    ({"model_type": "gemma3", "max_position_embeddings": 99, "text_config": {
        "model_type": "gemma3_text", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 97, "intermediate_size": 37, "max_position_embeddings": 131072}},
     131072),
])
def test_the_context_window_is_resolved_per_family(config, window):
    assert ModelSpec.from_hf_config(config).context_window == window


def test_gpt2s_position_table_is_its_context_window():
    spec = ModelSpec.from_hf_config({"model_type": "gpt2", "n_embd": 48, "n_head": 6, "n_layer": 3,
                                     "vocab_size": 97, "n_positions": 1024})
    assert spec.position_table_rows == 1024


def test_the_roofline_context_sweep_ends_at_gpt2s_window(gpt2_run):
    run, attention = gpt2_run
    options = ViewOptions(len(run.steps) - 1, 0, False, "h100-sxm")
    data = roofline_data(run, ViewSources(attention, RUNNER_SERVICES, saved=True), options)
    context = dict(data.sweeps)["context"]
    assert [costs.step.context for costs in context] == [256, 512, GPT2_SMALL_POSITIONS]


def test_the_lesson_names_gpt2s_window(gpt2_run):
    run, _ = gpt2_run
    page = next(page for page in PAGES if page.key == "kv_cache")
    text = page_text(page, LessonInputs(run, 1, 0, get_hardware("h100-sxm")))
    assert f"whole context of {GPT2_SMALL_POSITIONS:,} tokens" in text


def test_the_cli_checks_positions_against_gpt2s_window(capsys):
    assert main(["roofline", "--config", "gpt2", "--context", "1025"]) == 2
    assert "1,025 positions exceed this model's context window of 1,024 tokens" in capsys.readouterr().err
    assert main(["info", "--config", "gpt2", "--prompt-tokens", "1024"]) == 0


def test_a_window_under_256_is_swept_within_it(gpt2_64):
    run, attention = gpt2_64
    assert run.steps[-1].context_length < 64
    options = ViewOptions(len(run.steps) - 1, 0, False, "h100-sxm")
    context = dict(roofline_data(run, ViewSources(attention, RUNNER_SERVICES, saved=True), options).sweeps)["context"]
    assert [costs.step.context for costs in context] == [4, 8, 16, 32, 64]


@pytest.mark.parametrize("scenario", [Scenario(context=65), Scenario(tokens=65), Scenario(batch=2, context=1000)])
def test_a_what_if_past_the_window_is_refused_with_the_clis_message(gpt2_64, scenario):
    """The notebook's figure and the app's roofline draw through `render`: one check, the CLI's words."""
    run, attention = gpt2_64
    options = ViewOptions(len(run.steps) - 1, 0, False, "h100-sxm", what_if=scenario)
    with pytest.raises(UsageError, match="positions exceed this model's context window of 64 tokens"):
        render(run, ViewSources(attention, RUNNER_SERVICES, saved=True), options, "roofline")
    assert render(run, ViewSources(attention, RUNNER_SERVICES, saved=True),
                  ViewOptions(len(run.steps) - 1, 0, False, "h100-sxm", what_if=Scenario(context=64)), "roofline")


def test_the_notebooks_scenario_past_the_window_is_refused(gpt2_64, tmp_path):
    from explorer.notebook import Explorer
    from explorer.saved import save_run

    run, attention = gpt2_64
    explorer = Explorer.open(save_run(run, attention, tmp_path / "run.json"))
    with pytest.raises(UsageError, match="1,000 positions exceed this model's context window of 64 tokens"):
        explorer.figure("roofline", what_if=Scenario(context=1000))


def test_the_clis_what_ifs_stop_at_the_window(capsys):
    """The context x4 what-if of a step near GPT-2's window is taken at the window."""
    assert main(["roofline", "--config", "gpt2", "--context", "512", "--what-ifs"]) == 0
    out = capsys.readouterr().out
    assert "context 1024 (x2)" in out and "context 2048" not in out
