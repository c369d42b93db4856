"""What the results of the lab's multi-process experiments (tensor and expert parallelism) share: the
slowest rank's times of a step. A rank's run has `step_ms` (each step's wall ms, step 0 the prefill,
measured) and `comm_ms(step)` (the ms of that step in its collectives, measured)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def slowest_step_ms(runs: Sequence, step: int) -> tuple[float, float]:
    """(step `step`, its time in collectives), ms, the slowest rank's (measured)."""
    return max((run.step_ms[step], run.comm_ms(step)) for run in runs)


def slowest_decode_ms(runs: Sequence) -> tuple[float, float]:
    """(median decode step, median time in its collectives), ms, the slowest rank's (measured); NaNs
    where the run decoded no step after the prefill."""
    steps = range(1, len(runs[0].step_ms))
    if not steps:
        return float("nan"), float("nan")
    return max((statistics.median(run.step_ms[s] for s in steps), statistics.median(run.comm_ms(s) for s in steps))
               for run in runs)
