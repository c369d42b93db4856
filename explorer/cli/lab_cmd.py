"""`python -m explorer lab NAME PROMPT`: one of the lab's experiments (`explorer.lab.table.LAB`) run on
the model, its table and lesson printed; `--html FILE` writes its figure too."""

from __future__ import annotations

import argparse
from pathlib import Path

from explorer.cli.model_args import add_model_arguments, load_for
from explorer.cli.options import MODEL_ENVIRONMENT, HelpFormatter, whole
from explorer.errors import ExplorerError
from explorer.lab.params import read_params
from explorer.lab.table import LAB
from explorer.ui.plain import markdown_plain


def register(subparsers) -> None:
    """Add the `lab` command, with one sub-command per experiment and its parameters as options."""
    parser = subparsers.add_parser("lab", help="an inference engine's trick run for real: " + ", ".join(LAB),
                                   formatter_class=HelpFormatter, description="Run one of the lab's experiments on the prompt and print what "
                                               "it measured, computed and estimated.")
    experiments = parser.add_subparsers(dest="experiment", required=True, metavar="NAME", title="experiments")
    for experiment in LAB.values():
        sub = experiments.add_parser(experiment.name, help=experiment.title, description=experiment.what,
                                     formatter_class=HelpFormatter, epilog=MODEL_ENVIRONMENT)
        add_model_arguments(sub)
        for param in experiment.params:
            option = f"--{param.name.replace('_', '-')}"
            if param.choices:
                sub.add_argument(option, dest=param.name, choices=param.names, default=param.name_of(param.default),
                                 help=f"{param.help} (default {param.name_of(param.default)})")
            else:
                sub.add_argument(option, dest=param.name, type=whole(param.minimum, param.maximum),
                                 default=param.default,
                                 help=f"{param.help} ({param.minimum}-{param.maximum}; default {param.default})")
        sub.add_argument("--html", type=Path, help="also write the figure to this HTML file (opens offline)")
        sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load, run the experiment on the prompt's ids, print its table and lesson; returns the exit code.

    Raises:
        UsageError: an empty prompt (before the model loads); argparse has checked each parameter's range.
        ExplorerError: a model that cannot run the experiment (shape-only), or an unwritable --html file.
    """
    experiment = LAB[args.experiment]
    values = read_params(experiment.params, {param.name: getattr(args, param.name) for param in experiment.params})
    loaded = load_for(args)
    from explorer.runner.lab import RUNNERS
    from explorer.runner.session import InferenceSession

    ids = InferenceSession(loaded).prompt_ids(args.prompt, args.chat_template)
    result = RUNNERS[experiment.name](loaded, ids, **values)
    print(f"model: {loaded.description}")
    print("\n".join(result.lines()))
    print("\n" + markdown_plain(experiment.lesson(result)))
    if args.html:
        try:
            experiment.figure(result).write_html(args.html, include_plotlyjs=True)
        except OSError as exc:
            raise ExplorerError(f"Cannot write the figure to {args.html}: {exc.strerror}.") from exc
        print(f"\nwrote the figure to {args.html}")
    return 0
