"""`python -m explorer COMMAND ...`: each command lives in its own module with `register(subparsers)`.

A command's handler returns an exit code; an `ExplorerError` becomes a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from explorer.errors import ExplorerError

COMMAND_MODULES = ["explorer.cli.trace_cmd", "explorer.cli.analysis_cmds", "explorer.cli.lens_cmd",
                   "explorer.cli.equivalence_cmd"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command's sub-parser."""
    parser = argparse.ArgumentParser(prog="python -m explorer", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv`, run the command, and return its exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ExplorerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
