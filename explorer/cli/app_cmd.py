"""`llm-explorer app`: the browser app, with the options of `python app.py`."""

from __future__ import annotations

import argparse

from explorer.cli.options import HelpFormatter
from explorer.ui import launch


def register(subparsers) -> None:
    """Add the `app` command."""
    parser = subparsers.add_parser("app", help="start the explorer in the browser", description=launch.DESCRIPTION,
                                   epilog=launch.ENVIRONMENT, formatter_class=HelpFormatter)
    launch.add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Serve the app until interrupted (`launch.serve` exits with a one-line message on failure)."""
    launch.serve(args)
    return 0
