"""Which step a session may run next: a decode step after a prefill that went through, and a branch
back to an earlier step, whose KV cache is cropped to that step's context."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import DynamicCache

from explorer.errors import SessionStateError
from explorer.run import Run
from explorer.runner.batch import Batch
from explorer.trace import StepTrace


def check_can_decode(run: Run, failed_step: str | None) -> None:
    """Refuse a decode step before any prefill, after a step that failed part-way (`failed_step`: its
    error, the cache may be half written), or once generation has ended (`SessionStateError`)."""
    if not run.steps:
        raise SessionStateError("Run the prefill first: a decode step continues a prompt.")
    if failed_step is not None:
        raise SessionStateError(f"The previous step failed ({failed_step}); its KV cache may be "
                                "half written. Run a new prefill.")
    if run.finished:
        reason = run.latest.finish_reason
        raise SessionStateError(
            f"Generation has ended ({reason.replace('_', ' ')}). Run a new prefill to start again."
        )


def check_branch(steps: Sequence[StepTrace], step_index: int, batch: Batch | None) -> None:
    """Refuse to continue from `step_index` where it is not an earlier step (below the latest) or the
    run is a batch of prompts (`SessionStateError`)."""
    if batch is not None:
        raise SessionStateError("A batch of prompts cannot go back to an earlier step; run a new prefill.")
    if not 0 <= step_index < len(steps) - 1:
        raise SessionStateError(f"There is no earlier step {step_index} to continue from: "
                                f"the steps run are 0 to {len(steps) - 1}.")


def crop_cache(cache: DynamicCache, context: int) -> None:
    """Cut every cache layer back to its first `context` positions (`DynamicCache.crop`).

    Raises:
        SessionStateError: a sliding-window layer has filled its window, so it no longer holds the
            keys of the earlier context (transformers can only crop it while it keeps them).
    """
    for layer in cache.layers:
        window = getattr(layer, "sliding_window", None)
        if window is not None and layer.get_seq_length() >= window:
            raise SessionStateError(f"This model's sliding-window layers keep only their last {window} "
                                    "keys and have dropped the earlier ones, so the cache cannot go back "
                                    "to that step. Run a new prefill to start again.")
    cache.crop(context - cache.get_seq_length())  # a negative count: the positions to remove
