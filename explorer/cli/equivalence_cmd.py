"""`python -m explorer equivalence PROMPT`: the same greedy decode, mathematically equivalent ways."""

from __future__ import annotations

import argparse

from explorer.analysis.equivalence import DEFAULT_STEPS, MAX_STEPS
from explorer.cli.model_args import add_model_arguments, load_for
from explorer.cli.options import MODEL_ENVIRONMENT, HelpFormatter, whole


def register(subparsers) -> None:
    """Add the `equivalence` command."""
    parser = subparsers.add_parser(
        "equivalence", help="equivalent is not identical: the same prompt's logits computed equivalent ways",
        formatter_class=HelpFormatter, epilog=MODEL_ENVIRONMENT,
        description="Decode PROMPT greedily as the model is loaded (batch 1, KV cache), then the same tokens "
                    "in a batch of 4 (left-padded), with the other attention implementation (eager/SDPA), "
                    "in the other precision (float32/bfloat16, on a copy) and without the KV cache; print each "
                    "step's max and mean |Δlogits| and where the greedy tokens first differ.",
    )
    add_model_arguments(parser)
    parser.add_argument("--steps", type=whole(1, MAX_STEPS), default=DEFAULT_STEPS,
                        help=f"greedy steps compared (1-{MAX_STEPS}; step 0: the prefill's)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load, run the experiment, print its table; returns the exit code.

    Raises:
        UsageError: an empty prompt (before the model loads).
        ExplorerError: the model cannot be loaded, or the prompt is too long.
    """
    from explorer.runner.equivalence import run_equivalence
    from explorer.runner.session import InferenceSession

    loaded = load_for(args)
    session = InferenceSession(loaded)
    ids = session.prompt_ids(args.prompt, args.chat_template)
    result = run_equivalence(loaded, ids, args.steps)
    print(f"model: {loaded.description}")
    print("\n".join(result.lines(lambda token_id: session.pieces([token_id])[0])))
    return 0
