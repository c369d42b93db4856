"""Every shell command and Python block the README and the documentation show is run, unless its fence
says why it cannot run offline (`{skip="..."}`) or names the test that runs it (`{tested_by="..."}`):
a documented command that breaks fails here.

A command is split into words by bash itself (quotes, `$'...'`, comments), then `llm-explorer ...`
runs in this process through the installed `llm-explorer` script's entry point (one
interpreter start for all of them); any other command runs under bash. Each runs in an empty folder.
"""

from __future__ import annotations

import subprocess
from importlib.metadata import entry_points

import pytest
from docs_code import ROOT, RUN_LANGUAGES, snippets

ATTRIBUTES = {"skip", "tested_by"}
RUNNABLE = [s for s in snippets() if s.lang in RUN_LANGUAGES and not s.attrs]


def command_lines(code: str) -> list[str]:
    """A bash block's commands, one a line (a trailing backslash continues a line), blank lines dropped."""
    return [line for line in code.replace("\\\n", " ").splitlines() if line.strip()]


def bash_words(line: str) -> list[str]:
    """`line` split into words exactly as bash splits a simple command (its comment dropped)."""
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], check=True, capture_output=True)
    return done.stdout.decode().split("\0")[:-1]


def script_entry_point(name: str):
    """The function the installed console script `name` calls (pyproject.toml's [project.scripts])."""
    (entry,) = entry_points(group="console_scripts", name=name)
    return entry.load()


COMMANDS = [pytest.param(line, id=f"{s.id}: {line.split('#')[0].strip()[:60]}")
            for s in RUNNABLE if s.lang == "bash" for line in command_lines(s.code)]
PYTHON = [pytest.param(s.code, id=s.id) for s in RUNNABLE if s.lang == "python"]


def test_every_block_that_is_not_run_here_says_why_or_names_its_test():
    shown = [s for s in snippets() if s.lang in RUN_LANGUAGES]
    assert len(RUNNABLE) >= 2 and len(shown) > len(RUNNABLE)
    for snippet in shown:
        assert set(snippet.attrs) <= ATTRIBUTES, (snippet.id, snippet.attrs)
        assert snippet.attrs.get("skip", "x").strip(), f"{snippet.id}: a skip needs its reason"
        if "tested_by" in snippet.attrs:
            test = ROOT / snippet.attrs["tested_by"]
            assert test.is_file(), f"{snippet.id}: no {test}"
            if snippet.lang == "python":  # the test reads the block from its page
                assert snippet.page in test.read_text(encoding="utf-8"), f"{test} does not read {snippet.page}"


def test_bash_splits_a_documented_line_as_a_shell_does():
    assert bash_words("""llm-explorer trace $'Hi\\nWhat?' --batch 2   # a comment""") == [
        "llm-explorer", "trace", "Hi\nWhat?", "--batch", "2"]


@pytest.mark.real_model
@pytest.mark.parametrize("line", COMMANDS)
def test_a_documented_command_runs(line, embedded_model, embedded_cache_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(embedded_cache_dir))  # converted there by `embedded_model`
    monkeypatch.chdir(tmp_path)
    words = bash_words(line)
    if words[0] == "llm-explorer":
        try:
            code = script_entry_point("llm-explorer")(words[1:])
        except SystemExit as stop:
            code = stop.code
        out = capsys.readouterr()
        assert code in (0, None), f"{line}\n{out.out[-2000:]}\n{out.err[-2000:]}"
        assert out.out.strip(), f"{line} printed nothing"
    else:
        subprocess.run(["bash", "-c", line], check=True, cwd=tmp_path)


@pytest.mark.parametrize("code", PYTHON)
def test_a_documented_python_block_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "snippet", "exec"), {})  # noqa: S102
