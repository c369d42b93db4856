"""`llm-explorer COMMAND ...` (or `python -m explorer COMMAND ...`): each command lives in its own module
with `register(subparsers)`.

A command's handler returns an exit code. Exit codes: 0 done; 1 a runtime failure (an `ExplorerError`:
a model that cannot load, a prompt too long, a file that cannot be written), said in one line;
2 a usage error (argparse's own, or a `UsageError`: options that do not fit one another or the
model); 141 the reader of the output went away (`... | head`), quietly.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from explorer import __version__
from explorer.cli.options import MODEL_ENVIRONMENT, HelpFormatter
from explorer.closed_pipe import CLOSED_PIPE_EXIT, silence_output
from explorer.errors import ExplorerError, UsageError

COMMAND_MODULES = ["explorer.cli.app_cmd", "explorer.cli.trace_cmd", "explorer.cli.analysis_cmds",
                   "explorer.cli.lens_cmd", "explorer.cli.equivalence_cmd", "explorer.cli.lab_cmd"]
PROG = "llm-explorer"
DESCRIPTION = """Step through one real LLM inference, prefill then decode, stop by stop: every tensor
shape, the attention, the KV cache, the sampling and each operator on the roofline. It runs the
embedded SmolLM2-135M-Instruct offline, any Hugging Face causal LM, or any config shape-only."""
EXAMPLES = """examples:
  {prog} app                                # the browser app, at http://127.0.0.1:7860
  {prog} app --model Qwen/Qwen3-0.6B --port 7861
  {prog} trace "What is the capital of France?" --steps 8
  {prog} trace --config qwen3-8b --prompt-tokens 17   # shape-only: no weights
  {prog} info --config qwen3-0.6b
  {prog} roofline --config llama-3-8b --stage decode --batch 64
  {prog} lens "The capital of France is"      # each layer's top-1 at the last position
  {prog} equivalence "The capital of France is"
  {prog} lab prefix "You are a helpful tutor. Explain the KV cache." --chat-template

'{prog} COMMAND --help' gives a command's options, their defaults and the environment it reads.

""" + MODEL_ENVIRONMENT


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The argument parser with every command's sub-parser; `prog` is the name the help shows."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EXAMPLES.format(prog=prog),
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"llm-inference-explorer {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse `argv` (default: the command line), run the command, and return its exit code (see above;
    argparse's usage errors exit 2 through SystemExit)."""
    args = build_parser(prog).parse_args(argv)
    try:
        code = args.handler(args)
        sys.stdout.flush()  # here, not at exit, where a closed pipe's error could only be printed
        return code
    except BrokenPipeError:
        silence_output()
        return CLOSED_PIPE_EXIT
    except ExplorerError as exc:
        try:
            print(f"error: {exc}", file=sys.stderr)
        except BrokenPipeError:
            silence_output()
            return CLOSED_PIPE_EXIT
        return 2 if isinstance(exc, UsageError) else 1
