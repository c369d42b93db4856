"""The named API's step endpoints, /prefill, /decode, /run and /reset: twins of the page's events (the
same handlers, inputs, validators and queues; no trigger on the page), whose outputs are plain values
where the page's events send updates of its controls: the step shown and the layer as whole numbers
(the page's step menu and layer slider also get their choices and range), a view not drawn as None.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import gradio as gr

from explorer.ui.handlers import STEP_OUTPUT_NAMES

# The step outputs a twin sends as plain values: the two controls, then every view's figure.
PLAIN = {STEP_OUTPUT_NAMES.index("step"), STEP_OUTPUT_NAMES.index("layer")}


def plain(value):
    """A component's update as the value it sets; None where it sets none (`gr.skip()`: a view not drawn)."""
    return value.get("value") if isinstance(value, dict) and value.get("__type__") == "update" else value


def plain_outputs(values: tuple) -> tuple:
    """The step outputs with the step shown, the layer and the views as plain values (`PLAIN`, and every
    output after `STEP_OUTPUT_NAMES`: the figures); the page's own outputs (its state, the questions
    shown or hidden) as they are."""
    return tuple(plain(value) if i in PLAIN or i >= len(STEP_OUTPUT_NAMES) else value
                 for i, value in enumerate(values))


def with_plain_outputs(handler: Callable) -> Callable:
    """`handler` (a function or a generator of step outputs) returning `plain_outputs`; its signature
    kept, so that Gradio names the parameters after it and passes its request and progress."""
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def steps(*args, **kwargs):
            for values in handler(*args, **kwargs):
                yield plain_outputs(values)

        return steps

    @functools.wraps(handler)
    def step(*args, **kwargs):
        return plain_outputs(handler(*args, **kwargs))

    return step


def step_numbers() -> tuple[gr.Number, gr.Number]:
    """The two outputs a twin sends in place of the step menu and the layer slider (never shown)."""
    return (gr.Number(label="Step shown (0: the prefill, k: decode step k)", precision=0, visible=False),
            gr.Number(label="Layer shown", precision=0, visible=False))


def api_outputs(step_outputs: list, numbers: tuple[gr.Number, gr.Number]) -> list:
    """The page's step outputs with `numbers` in place of the step menu and the layer slider."""
    outputs = list(step_outputs)
    for name, number in zip(("step", "layer"), numbers, strict=True):
        outputs[STEP_OUTPUT_NAMES.index(name)] = number
    return outputs


def add_endpoint(handler: Callable, inputs: list, outputs: list, **event) -> None:
    """The named endpoint: `handler` on `inputs`, run with the page event's settings `event` (its
    api_name, description, queue, validator), its outputs plain (`with_plain_outputs`)."""
    gr.on(triggers=[], fn=with_plain_outputs(handler), inputs=inputs, outputs=outputs, **event)
