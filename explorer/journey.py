"""The journey of one token through the model as rows of text: shared by the CLI and the UI.

Pure Python over traces (no torch, no gradio).
"""

from __future__ import annotations

from explorer.trace import OpRecord, StepTrace

JOURNEY_HEADER = ["stop", "kind", "prefill: in -> out", "prefill ms", "decode: in -> out", "decode ms"]


def journey_rows(prefill: StepTrace, decode: StepTrace | None, layer: int = 0) -> list[list[str]]:
    """One row per stop outside the layers and inside `layer`, in execution order.

    Args:
        prefill: the prefill step's trace.
        decode: a decode step's trace, or None before the first decode step ("-" in its columns).
        layer: which decoder layer's stops to list.
    """
    decode_ops = {op.name: op for op in decode.ops} if decode else {}
    rows = []
    for op in prefill.ops:
        if op.layer not in (None, layer):
            continue
        other = decode_ops.get(op.name)
        rows.append([op.name, op.kind, flow_text(op), ms_text(op),
                     flow_text(other) if other else "-", ms_text(other) if other else "-"])
    return rows


def flow_text(op: OpRecord) -> str:
    """`[1, 35, 576] -> [1, 35, 192]`; several tensors are separated by spaces; no shape reads "text"."""
    inputs = " ".join(shape_text(s) for s in op.input_shapes) or "text"
    outputs = " ".join(shape_text(s) for s in op.output_shapes) or "text"
    return f"{inputs} -> {outputs}"


def shape_text(shape: list[int]) -> str:
    """`[1, 3, 35, 64]`."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def ms_text(op: OpRecord) -> str:
    """Wall time in ms, two decimals below 100 ms and none above ("0.42", "113"), or "view" for a
    stop that launches no kernel."""
    if op.wall_ms is None:
        return "view"
    return f"{op.wall_ms:.2f}" if op.wall_ms < 100 else f"{op.wall_ms:.0f}"


def step_label(trace: StepTrace) -> str:
    """"prefill" or "step k"."""
    return "prefill" if trace.stage == "prefill" else f"step {trace.step_index}"
