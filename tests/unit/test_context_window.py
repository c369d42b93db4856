"""A model's context window, resolved per family by `ModelSpec`, reaches every view that shows one.

GPT-2's config names it `n_positions` (1,024 for GPT-2 small), not `max_position_embeddings`: the
roofline's context sweep, the lesson's KV-cache page and the CLI's checks must all read 1,024.
"""

from __future__ import annotations

import json

import pytest

from explorer.analysis.hardware import get_hardware
from explorer.analysis.spec import ModelSpec
from explorer.cli import main
from explorer.figures.view_fetch import roofline_data
from explorer.figures.view_types import ViewOptions, ViewSources
from explorer.lesson import PAGES, LessonInputs, page_text
from explorer.runner.view_services import RUNNER_SERVICES
from explorer.saved import load_run
from tests.figure_goldens import DATA

GPT2_SMALL_POSITIONS = 1024


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    """The tiny GPT-2 golden run, its config given GPT-2 small's 1,024 positions."""
    saved = json.loads((DATA / "gpt2.json").read_text())
    saved["config"]["n_positions"] = GPT2_SMALL_POSITIONS
    path = tmp_path_factory.mktemp("runs") / "gpt2.json"
    path.write_text(json.dumps(saved))
    run, attention = load_run(path)
    return run, attention


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
