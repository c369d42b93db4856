"""`llm-explorer` as a shell sees it, each in its own process: exit code 2 for a usage error (argparse's,
naming the option), 1 for a failure at run time, a quiet end when the reader of its output goes away,
and a help that gives each option's default and the environment it reads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from explorer.closed_pipe import CLOSED_PIPE_EXIT

SHAPE_ONLY_TRACE = ["trace", "--config", "qwen3-0.6b", "--prompt-tokens", "3", "--steps", "2"]


def explorer_command(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m explorer ARGV...` run to its end, its output as text."""
    return subprocess.run([sys.executable, "-m", "explorer", *argv], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, **kwargs)


def test_a_usage_error_exits_2_naming_the_option():
    done = explorer_command("trace", "hi", "--steps", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == "python -m explorer trace: error: argument --steps: must be >= 1, not 0"


def test_a_failure_at_run_time_exits_1_in_one_line():
    done = explorer_command("info", "--config", "no-such-model")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert "neither a preset nor a config.json" in done.stderr


def test_a_reader_gone_before_the_output_ends_the_trace_quietly():
    """As `... | head -1` once head has exited: every write meets a closed pipe."""
    process = subprocess.Popen([sys.executable, "-m", "explorer", *SHAPE_ONLY_TRACE], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    process.stdout.close()  # the reader goes away before the first line
    _, err = process.communicate(timeout=300)
    assert process.returncode == CLOSED_PIPE_EXIT
    assert b"Traceback" not in err and b"BrokenPipeError" not in err and b"error" not in err


def test_the_same_trace_read_to_its_end_exits_0():
    done = explorer_command(*SHAPE_ONLY_TRACE)
    assert done.returncode == 0 and "generated text:" in done.stdout


@pytest.mark.parametrize("argv, shown", [
    (["trace"], ["--steps STEPS         decode steps after the prefill (default: 3)", "(default: auto)",
                 "--top-p TOP_P         1.0 disables (default: 1.0)", "EXPLORER_CACHE_DIR", "HF_HUB_OFFLINE=1"]),
    (["app"], ["(default: $GRADIO_SERVER_PORT or 7860)", "--share", "GRADIO_SERVER_NAME, GRADIO_SERVER_PORT",
               "EXPLORER_MAX_SESSIONS", "SPACE_ID"]),
    (["roofline"], ["(default: h100-sxm)", "the KV cache's dtype (default: bf16)"]),
    (["lab", "prefix"], ["(0-2048; default 0)", "EXPLORER_CACHE_DIR"]),
])
def test_help_gives_each_default_and_the_environment(argv, shown):
    done = explorer_command(*argv, "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # argparse wraps the help to the terminal's width
    for words in shown:
        assert " ".join(words.split()) in text
    assert "(default: None)" not in text and "(default: False)" not in text
