"""`python -m explorer lens PROMPT [--step N]`: what each layer predicts at the last position of a step."""

from __future__ import annotations

import argparse

from explorer.cli.model_args import add_model_arguments, load_for
from explorer.cli.options import MODEL_ENVIRONMENT, HelpFormatter, whole
from explorer.config import SamplingSettings
from explorer.figures.lens import LensColumns, first_top1_row, row_label
from explorer.journey import step_label
from explorer.trace import LensRecord, StepTrace


def register(subparsers) -> None:
    """Add the `lens` command."""
    parser = subparsers.add_parser(
        "lens", help="the logit lens: each layer's top-1 token at the last position of a step",
        formatter_class=HelpFormatter, epilog=MODEL_ENVIRONMENT,
        description="Run the prefill (and --step decode steps, greedy), then print, for the step's last "
                    "position, the top-1 token of the residual stream after the embedding and after each "
                    "layer read through the model's own final norm and LM head, and the first layer at "
                    "which the token the step chose is top-1.",
    )
    add_model_arguments(parser)
    parser.add_argument("--step", type=whole(0), default=0, help="0: the prefill; k: the k-th decode step")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load, prefill, decode greedily up to `args.step`, print the lens; returns the exit code.

    Raises:
        UsageError: an empty prompt (before the model loads).
        ExplorerError: the model cannot be loaded or run the prompt.
    """
    loaded = load_for(args)
    from explorer.runner.drive import decode_steps
    from explorer.runner.session import InferenceSession

    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=args.step + 1))
    trace = session.prefill(args.prompt, use_chat_template=args.chat_template)
    if not session.finished:
        trace = [trace, *decode_steps(session, args.step)][-1]
    print(f"model: {loaded.description}")
    print("\n".join(lens_lines(trace, session.run.lens(trace.step_index), session.pieces)))
    return 0


def lens_lines(trace: StepTrace, lens: LensRecord | None, pieces) -> list[str]:
    """The lines printed for `trace` and its `lens`: one per row (the embedding, then each layer) at the
    last position, then the first layer whose top-1 is the token the step chose. `pieces(ids)` names token ids."""
    if lens is None:
        return ["no logit lens: shape-only mode computes no values"]
    columns = LensColumns.join([lens])
    position, chosen = lens.positions[-1], lens.next_ids[-1]
    chosen_piece = pieces([chosen])[0]
    lines = [f"{step_label(trace)}, position {position}: the token chosen is {chosen_piece!r} "
             f"(probabilities computed over the full vocabulary)",
             f"{'residual stream after':<22} {'top-1':<16} {'p(top-1)':>9} {'p(chosen)':>10} {'entropy':>9}"]
    for row in range(lens.top_ids.shape[0]):
        top = pieces([int(lens.top_ids[row, -1, 0])])[0]
        lines.append(f"{row_label(row):<22} {top!r:<16} {lens.top_probs[row, -1, 0]:>9.3f} "
                     f"{lens.next_probs[row, -1]:>10.3g} {lens.entropy_bits[row, -1]:>6.2f} bits")
    first = first_top1_row(columns, len(lens.positions) - 1)
    lines.append(f"{chosen_piece!r} is first top-1 after {row_label(first)} (row {first} of "
                 f"{lens.top_ids.shape[0] - 1})" if first is not None else f"{chosen_piece!r} is never top-1")
    return lines
