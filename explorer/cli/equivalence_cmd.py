"""`python -m explorer equivalence PROMPT`: the same greedy decode, mathematically equivalent ways."""

from __future__ import annotations

import argparse

from explorer.cli.model_args import add_model_arguments, load_for
from explorer.errors import PromptError


def register(subparsers) -> None:
    """Add the `equivalence` command."""
    parser = subparsers.add_parser(
        "equivalence", help="equivalent is not identical: the same prompt's logits computed equivalent ways",
        description="Decode PROMPT greedily as the model is loaded (batch 1, KV cache), then the same tokens "
                    "in a batch of 4 (left-padded), with the other attention implementation (eager/SDPA), "
                    "in the other precision (float32/bfloat16, on a copy) and without the KV cache; print each "
                    "step's max and mean |Δlogits| and where the greedy tokens first differ.",
    )
    add_model_arguments(parser)
    parser.add_argument("--steps", type=int, default=8, help="greedy steps compared (1-32; step 0: the prefill's)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load, run the experiment, print its table; returns the exit code.

    Raises:
        ExplorerError: an empty prompt or steps out of range (before the model loads), a prompt too long.
    """
    from explorer.runner.equivalence import MAX_STEPS, run_equivalence
    from explorer.runner.session import InferenceSession

    if not 1 <= args.steps <= MAX_STEPS:
        raise PromptError(f"--steps must be 1 to {MAX_STEPS}.")
    loaded = load_for(args)
    session = InferenceSession(loaded)
    ids = session.prompt_ids(args.prompt, args.chat_template)
    result = run_equivalence(loaded, ids, args.steps)
    print(f"model: {loaded.description}")
    print("\n".join(result.lines(lambda token_id: session.pieces([token_id])[0])))
    return 0
