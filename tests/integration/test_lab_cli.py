"""`llm-explorer lab NAME PROMPT`: every experiment of the table is a sub-command with its parameters;
a run prints its table and lesson (and writes its figure with --html); a parameter out of its range is
refused before the model loads."""

from __future__ import annotations

import pytest
from tiny_models import tiny_model

from explorer.cli import build_parser, main
from explorer.lab.table import LAB


@pytest.fixture
def loads_tiny(monkeypatch):
    """Every model load gives the tiny Llama; the loads are counted."""
    loads = []
    model = tiny_model("llama")
    monkeypatch.setattr("explorer.runner.loading.load", lambda **kwargs: loads.append(kwargs) or model)
    return loads


def test_every_experiment_is_a_sub_command_with_its_parameters():
    parser = build_parser()
    for name, experiment in LAB.items():
        args = parser.parse_args(["lab", name, "Hi", *(f"--{p.name.replace('_', '-')}={p.default}"
                                                       for p in experiment.params)])
        assert args.experiment == name and all(getattr(args, p.name) == p.default for p in experiment.params)


def test_a_run_prints_its_table_and_lesson_and_writes_its_figure(loads_tiny, capsys, tmp_path):
    path = tmp_path / "prefix.html"
    assert main(["lab", "prefix", "Hello there, how are you?", "--prefix", "10", "--html", str(path)]) == 0
    out = capsys.readouterr().out
    assert "request B: its first 10 + " in out and "Prefix caching. Request B shares its first 10 tokens" in out
    assert "**" not in out and path.read_text().count("lab-prefix") >= 1


@pytest.mark.parametrize("value,message", [("-1", "must be 0 to 2048, not -1"),
                                           ("2.5", "must be a whole number 0 to 2048, not '2.5'")])
def test_a_parameter_out_of_range_is_refused_by_the_parser_before_the_model_loads(loads_tiny, capsys, value, message):
    with pytest.raises(SystemExit) as usage_error:
        main(["lab", "prefix", "Hello", "--prefix", value])
    assert usage_error.value.code == 2 and loads_tiny == []
    assert capsys.readouterr().err.splitlines()[-1] == f"llm-explorer lab prefix: error: argument --prefix: {message}"
