"""The journey of one token through the model as rows of text: shared by the CLI and the UI.

Pure Python over traces (no torch, no gradio). A wall time is shown as the median of the stop's
repeats in the step with their p10-p90 (`explorer.analysis.timing_stats`): the layers each run it
once; a stop outside the layers is one measurement; a shape-only step (meta device) has no times.
"""

from __future__ import annotations

from explorer.analysis.timing_stats import NOISE_FLOOR_MS, stop_timing, timing_text
from explorer.trace import OpRecord, StepTrace

JOURNEY_HEADER = ["stop", "kind", "prefill: in -> out", "prefill ms", "decode: in -> out", "decode ms"]
SHAPE_ONLY_HEADER = ["stop", "kind", "prefill: in -> out", "decode: in -> out"]


def journey_header(prefill: StepTrace) -> list[str]:
    """The table's column names: without the ms columns for a shape-only run (nothing was timed)."""
    return SHAPE_ONLY_HEADER if prefill.shape_only else JOURNEY_HEADER


def journey_rows(prefill: StepTrace, decode: StepTrace | None, layer: int = 0) -> list[list[str]]:
    """One row per stop outside the layers and inside `layer`, in execution order, under
    `journey_header(prefill)`.

    Args:
        prefill: the prefill step's trace.
        decode: a decode step's trace, or None before the first decode step ("-" in its columns).
        layer: which decoder layer's stops to list.

    The ms cells (`timing_text`, milliseconds) are each stop's median over the layers of the step,
    with its p10-p90 ("0.09 [0.08-0.11]"), the same for every layer; outside the layers one
    measurement ("0.42"); "<0.01 noise" below the noise floor; "view" for no kernel. A shape-only run
    has no ms cells.
    """
    timed = not prefill.shape_only
    decode_ops = {op.name: op for op in decode.ops} if decode else {}
    rows = []
    for op in prefill.ops:
        if op.layer not in (None, layer):
            continue
        other = decode_ops.get(op.name)
        row = [op.name, op.kind, flow_text(op)] + ([ms_text(op, prefill)] if timed else [])
        row.append(flow_text(other) if other else "-")
        if timed:
            row.append(ms_text(other, decode) if other else "-")
        rows.append(row)
    return rows


def timing_note(prefill: StepTrace) -> str:
    """One line saying what the ms columns hold (or that a shape-only run has none)."""
    if prefill.shape_only:
        return "shape-only (meta device): no compute ran, so no wall times"
    return (f"ms: measured wall time. A layer's stop: median [p10-p90] over the {len(prefill.kv)} layers (each runs "
            "it once per step). Outside the layers: one measurement. "
            f"<{NOISE_FLOOR_MS:g} noise: below the timer's resolution and the hooks' own overhead.")


def flow_text(op: OpRecord) -> str:
    """`[1, 35, 576] -> [1, 35, 192]`; several tensors are separated by spaces; no shape reads "text"."""
    inputs = " ".join(shape_text(s) for s in op.input_shapes) or "text"
    outputs = " ".join(shape_text(s) for s in op.output_shapes) or "text"
    return f"{inputs} -> {outputs}"


def shape_text(shape: list[int]) -> str:
    """`[1, 3, 35, 64]`."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def ms_text(op: OpRecord, trace: StepTrace) -> str:
    """`op`'s wall time in `trace` as a cell (`timing_text`): the median [p10-p90] over the layers,
    one measurement outside them, "<0.01 noise", "view" (no kernel), or "-" in a shape-only step."""
    if trace.shape_only:
        return "-"
    return timing_text(stop_timing(trace, op))


def step_label(trace: StepTrace) -> str:
    """"prefill" or "step k"."""
    return "prefill" if trace.stage == "prefill" else f"step {trace.step_index}"
