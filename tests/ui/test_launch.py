"""The app's command line: a broken install or a bad argument is one line before any model work, and
`llm-explorer` speaks to a user (`--help`, `--version`) rather than to a developer."""

from __future__ import annotations

import pytest

import explorer
from explorer.cli import main as cli_main
from explorer.runner import loading
from explorer.ui import launch, static


def no_load(**kwargs):
    raise AssertionError("the model was loaded")


def test_a_missing_asset_is_named_as_a_broken_install_before_any_model_work(tmp_path, monkeypatch):
    (tmp_path / "app.css").write_text("body {}", encoding="utf-8")  # the other two files are missing
    monkeypatch.setattr(static, "ASSETS", tmp_path)
    monkeypatch.setattr(loading, "load", no_load)
    with pytest.raises(SystemExit) as exited:
        launch.main(["--port", "7999"])
    message = str(exited.value.code)
    assert message.startswith("error: The app's file assets/shortcuts.js is missing from the installed package")
    assert "pip install --force-reinstall llm-inference-explorer" in message and "port" not in message


def test_the_shipped_assets_are_read_from_the_package():
    assert [len(static.asset_text(name)) > 100 for name in static.ASSET_NAMES] == [True] * 3
    assert static.ASSETS.joinpath("examples.json").is_file()


@pytest.mark.parametrize("argv", [["--port", "70000"], ["--port", "0"], ["--dtype", "float8"],
                                  ["--model", "a", "--config", "b"], ["--max-prompt-tokens", "0"]])
def test_a_bad_argument_is_refused_by_the_parser_before_any_model_work(argv, monkeypatch, capsys):
    monkeypatch.setattr(loading, "load", no_load)
    with pytest.raises(SystemExit) as exited:
        cli_main(["app", *argv])
    assert exited.value.code == 2 and capsys.readouterr().err.splitlines()[-1].startswith("llm-explorer app: error:")


def test_help_names_the_commands_with_examples_and_version_gives_the_package(capsys):
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: llm-explorer [-h] [--version] COMMAND ...")
    for command in ("app", "trace", "roofline", "info"):
        assert f"\n    {command} " in out
    assert "llm-explorer app  " in out and "COMMAND --help" in out
    with pytest.raises(SystemExit):
        cli_main(["--version"])
    assert capsys.readouterr().out == f"llm-inference-explorer {explorer.__version__}\n"


class Built(Exception):
    """Raised by the stand-in `build_demo`: the app's limits were read, nothing was served."""


@pytest.mark.parametrize("env, argv, expected", [
    ({}, ["--hosted"], (20, 40)),
    ({"EXPLORER_MAX_SESSIONS": "45", "EXPLORER_MAX_SESSIONS_PER_ADDRESS": "35"}, ["--hosted"], (45, 35)),
    ({"EXPLORER_MAX_SESSIONS": "45"}, ["--hosted", "--max-sessions", "50", "--max-sessions-per-address", "30"],
     (50, 30)),
    ({}, ["--max-sessions-per-address", "8"], (64, 8)),
])
def test_the_slots_and_the_address_cap_come_from_the_space_variables_or_the_flags(env, argv, expected, monkeypatch):
    from explorer.ui import layout

    seen = []
    monkeypatch.setattr(layout, "build_demo", lambda *args, limits, **kwargs: seen.append(limits) or _built())
    for name in ("EXPLORER_MAX_SESSIONS", "EXPLORER_MAX_SESSIONS_PER_ADDRESS", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Built):
        launch.main(argv)
    assert (seen[0].max_sessions, seen[0].max_sessions_per_address) == expected


def _built():
    raise Built


@pytest.mark.parametrize("argv, message", [(["--max-sessions", "0"], "argument --max-sessions: must be >= 1, not 0"),
                                           (["--max-sessions-per-address", "-3"],
                                            "argument --max-sessions-per-address: must be >= 1, not -3")])
def test_a_slot_count_below_one_is_a_usage_error_naming_its_option(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(loading, "load", no_load)
    with pytest.raises(SystemExit) as exited:
        launch.main(argv)
    assert exited.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")


def test_a_bad_slot_count_in_the_environment_is_refused_under_its_option(monkeypatch, capsys):
    monkeypatch.setattr(loading, "load", no_load)
    monkeypatch.setenv("EXPLORER_MAX_SESSIONS", "lots")
    with pytest.raises(SystemExit) as exited:
        launch.main([])
    assert exited.value.code == 2 and "argument --max-sessions: must be a whole number >= 1, not 'lots'" in \
        capsys.readouterr().err


@pytest.mark.parametrize("argv, share, said", [
    (["--share"], True, "* No public link: Gradio could not reach its share servers (see above); the local URL works."),
    ([], False, "* --share also serves a temporary public link."),
])
def test_share_reaches_gradio_and_the_hint_names_the_command_s_own_option(argv, share, said, monkeypatch, capsys):
    import gradio as gr

    from explorer.ui.startup import PendingModel

    launched = []
    monkeypatch.setattr(gr.Blocks, "launch", lambda demo, **kwargs: launched.append(kwargs))  # no server, no link
    monkeypatch.setattr(gr.Blocks, "block_thread", lambda demo: None)
    monkeypatch.setattr(PendingModel, "start", lambda pending: None)  # no model load
    launch.main([*argv, "--port", "7999"])
    assert launched[0]["share"] is share and launched[0]["quiet"] is True  # quiet: no hint naming launch()
    out = capsys.readouterr().out
    assert out.splitlines() == ["* Running on local URL:  None", said] and "share=True" not in out
