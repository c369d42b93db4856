"""Out-of-range numbers refused with the app's own message, before the event is queued.

Gradio checks a Slider's or Number's range in its preprocess, which it also runs before an event's
validator: a value out of range fails there, and Gradio answers the push with a bare HTTP 400 (a
gradio_client user reads "400 Bad Request", the server prints the value, however many digits it
has). So the API's events are not preprocessed (`refuse_out_of_range`): their validator checks each
number against its control's range first and names the control, the range and the value, clipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import gradio as gr

NUMBER_TEXT_MAX = 16  # a value longer than this is written in scientific notation: "1e+300", never 300 digits


def number_text(value) -> str:
    """A value for a message: as written where short, else in 3 significant digits ("1e+300")."""
    text = str(value)
    if len(text) <= NUMBER_TEXT_MAX:
        return text
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError, OverflowError):
        return text[:NUMBER_TEXT_MAX] + "…"


def out_of_range(component, value) -> str | None:
    """Why `value` does not fit the Slider or Number `component` (its label, its range, the value
    clipped), or None where it fits (or the component has no range)."""
    if not isinstance(component, gr.Slider | gr.Number) or value is None:
        return None
    label = component.label or "a number"
    low, high = component.minimum, component.maximum
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return f"{label} must be a number, not {number_text(value)}."
    if (low is None or value >= low) and (high is None or value <= high):
        return None
    if low is not None and high is not None:
        span = f"{number_text(low)} to {number_text(high)}"
    else:
        span = f"at least {number_text(low)}" if low is not None else f"at most {number_text(high)}"
    return f"{label} must be {span}, not {number_text(value)}."


def as_shown(component, value):
    """A Slider's or Number's raw value (an event not preprocessed) as its box shows it: clipped to the
    component's range and rounded to its precision, as the page does once the box loses focus; None
    (an empty box, mid-typing) stays None. Any other component's value is returned as it is."""
    if not isinstance(component, gr.Slider | gr.Number) or value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    low, high = component.minimum, component.maximum
    value = min(value, high) if high is not None else value
    value = max(value, low) if low is not None else value
    return gr.Number.round_to_precision(value, component.precision)


def bounded(validator: Callable, components: list, exempt: tuple[str, ...]) -> Callable:
    """`validator` behind a range check of each input (`out_of_range`), skipping the components whose
    `elem_id` is in `exempt` (a range the page changes: the handler checks those)."""
    checked = [None if getattr(component, "elem_id", None) in exempt else component for component in components]

    async def validate(request: gr.Request | None, *inputs) -> list[dict]:
        messages = [out_of_range(component, value) for component, value in zip(checked, inputs, strict=False)]
        if any(messages):
            return [gr.validate(message is None, message or "") for message in messages]
        return await validator(request, *inputs)

    return validate


def refuse_out_of_range(demo: gr.Blocks, api_names: tuple[str, ...], exempt: tuple[str, ...]) -> None:
    """The events named `api_names` (the API's, with their validators) not preprocessed, their inputs'
    ranges checked by their validator instead (`bounded`): a value out of range is answered with
    the app's message (HTTP 422, shown on the control in a page, raised by gradio_client)."""
    for fn in demo.fns.values():
        if fn.api_name in api_names and fn.validator is not None and fn.inputs:
            fn.preprocess = False
            fn.validator = bounded(fn.validator, fn.inputs, exempt)
