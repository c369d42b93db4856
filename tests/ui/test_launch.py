"""The app's command line: a broken install or a bad argument is one line before any model work, and
`llm-explorer` speaks to a user (`--help`, `--version`) rather than to a developer; a signal stops the
app and deletes its temporary files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from processes import free_port, wait_until_served
from served_app import PlainClient

import explorer
from explorer.cli import main as cli_main
from explorer.runner import loading
from explorer.ui import launch, static


ROOT = Path(__file__).resolve().parents[2]


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
    ({}, ["--hosted"], (64, 48, 1)),
    ({"EXPLORER_MAX_SESSIONS": "45", "EXPLORER_MAX_SESSIONS_PER_ADDRESS": "35", "EXPLORER_PROXY_HOPS": "2"},
     ["--hosted"], (45, 35, 2)),
    ({"EXPLORER_MAX_SESSIONS": "45"}, ["--hosted", "--max-sessions", "50", "--max-sessions-per-address", "30",
                                       "--proxy-hops", "0"], (50, 30, 0)),
    ({}, ["--max-sessions-per-address", "8"], (64, 8, 0)),
])
def test_the_slots_and_the_address_cap_come_from_the_space_variables_or_the_flags(env, argv, expected, monkeypatch):
    from explorer.ui import layout

    seen = []
    monkeypatch.setattr(layout, "build_demo", lambda *args, limits, **kwargs: seen.append(limits) or _built())
    for name in ("EXPLORER_MAX_SESSIONS", "EXPLORER_MAX_SESSIONS_PER_ADDRESS", "EXPLORER_PROXY_HOPS", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Built):
        launch.main(argv)
    assert (seen[0].max_sessions, seen[0].max_sessions_per_address, seen[0].proxy_hops) == expected


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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_app_and_leaves_no_temporary_file(signum, tmp_path):
    """The app as a Space starts it (its own process), here started with SIGINT ignored as a script's
    background job is: an upload and an export on disk, then the signal; the app exits by itself and
    its temporary files are gone."""
    port, temp = free_port(), tmp_path / "gradio"
    env = {**os.environ, "GRADIO_TEMP_DIR": str(temp), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    app = subprocess.Popen([sys.executable, "app.py", "--hosted", "--config", "smollm2-135m", "--port", str(port)],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_served(url, app, 120)
        page = PlainClient(url, "10.0.0.1")
        assert page.http.post(f"{url}gradio_api/upload", files={"files": ("run.json", b"{}")}).status_code == 200
        assert page.call("prefill", {"Prompt length (tokens)": 8})["success"]
        assert page.call("export")["success"]
        assert [path for path in temp.rglob("*") if path.is_file()]
        page.close()
        app.send_signal(signum)
        assert app.wait(timeout=60) == 0
    finally:
        app.kill()
    assert [path for path in temp.rglob("*") if path.is_file()] == []


@pytest.mark.parametrize("readme", ["README.md", "space/README.md"])
def test_the_readmes_state_the_hosted_limits_the_app_applies(readme):
    from explorer.ui.hosting import HOSTED

    text = " ".join((ROOT / readme).read_text().split())  # a sentence may wrap anywhere
    assert f"prompts up to {HOSTED.max_prompt_tokens} tokens" in text
    assert f"{HOSTED.max_sessions} live sessions ({HOSTED.max_sessions_per_address} from one address)" in text
