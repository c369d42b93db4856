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
        given = {p.name: p.name_of(p.default) if p.choices else p.default for p in experiment.params}
        args = parser.parse_args(["lab", name, "Hi", *(f"--{p.name.replace('_', '-')}={given[p.name]}"
                                                       for p in experiment.params)])
        assert args.experiment == name and all(p.read(getattr(args, p.name)) == p.default for p in experiment.params)


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


def test_speculative_with_one_token_prints_a_result(loads_tiny, capsys):
    assert main(["lab", "speculative", "Hello there", "--tokens", "1", "--depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "no round to speculate (ask for 2 or more tokens)" in out and "Traceback" not in out


def test_speculative_with_a_draft_of_l_minus_one_layers_runs(loads_tiny, capsys):
    assert main(["lab", "speculative", "Hello there", "--depth", "2", "--tokens", "6"]) == 0  # the tiny model: L = 3
    assert "the first 2 of 3 layers" in capsys.readouterr().out
    assert main(["lab", "speculative", "Hello there", "--depth", "3", "--tokens", "6"]) == 1  # refused at run time
    assert "The draft depth k must be 1 to 2" in capsys.readouterr().err


def test_evict_with_w_equal_t_minus_one_says_what_to_change(loads_tiny, capsys):
    assert main(["lab", "evict", "Hi", "--window", "95", "--text-tokens", "96"]) == 1
    err = capsys.readouterr().err
    assert "no prediction past the window W = 95" in err and "nan" not in err


def test_menus_take_names_on_the_command_line(loads_tiny, capsys):
    assert main(["lab", "quant", "Hello there", "--bits", "int4", "--group-size", "4096", "--continue-tokens", "3",
                 "--text-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert "int4 per channel" in out and "g4096" not in out and "one scale a row: per channel" in out
    with pytest.raises(SystemExit):
        main(["lab", "quant", "Hello", "--bits", "3"])
    assert "invalid choice: '3'" in capsys.readouterr().err


def test_tiles_numbers_its_query_from_zero(loads_tiny, capsys):
    assert main(["lab", "tiles", "Hello there", "--position", "0", "--block", "4"]) == 0
    out = capsys.readouterr().out
    assert "query position 0 ('H'; counted from 0)" in out and "at position 0 of your prompt (counted from 0)" in out
    assert main(["lab", "tiles", "Hello there", "--position", "11"]) == 1
    assert "must be 0 to 10 (counted from 0" in capsys.readouterr().err
