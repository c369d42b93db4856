"""Taking turns on the shared model: each step of a run waits its turn (`explorer.runner.locks`), and
the page's status line says how many steps are ahead of it meanwhile.

A run of N tokens is not one long event that holds the model: its steps run in the turns queue
(`explorer.ui.wiring.TURNS_QUEUE`, many runs at once) and each asks the model's first-come,
first-served lock again, so a step asked for by another page during the run waits for the step in
flight and those in line before it. The page's own events keep their order through the visit's
lock, always taken before the model's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TypeVar

import gradio as gr

from explorer.runner.locks import model_lock
from explorer.ui.views import Visit

T = TypeVar("T")


def waiting_text(ahead: int, units: str = "steps") -> str:
    """The status line while a step waits: "Waiting for the model: 3 steps ahead of yours"; an
    experiment's pass (`units` "passes"): "... 3 turns ahead of this experiment's next pass"."""
    if units == "passes":
        return (f"Waiting for the model (every visitor's steps and passes take turns): {ahead} "
                f"{'turn' if ahead == 1 else 'turns'} ahead of this experiment's next pass")
    return f"Waiting for the model (every visitor's steps take turns): {ahead} step{'s' * (ahead != 1)} ahead of yours"


def shown_waits(progress: gr.Progress | None, units: str = "steps") -> Callable[[int], None] | None:
    """The `on_wait` of a model turn: the number of turns ahead, on the page's progress line."""
    if progress is None:
        return None
    return lambda ahead: progress(0.0, desc=waiting_text(ahead, units))  # Gradio shows a description only with a bar


def in_turns(visit: Visit, steps: Iterator[T], count: int, progress: gr.Progress | None) -> Iterator[T]:
    """The first `count` of `steps` (a run's decode steps, each computed when asked for; fewer where
    they end), each computed with the page's visit held and in the model's turn, both let go before
    it is yielded (drawn and sent). No turn is taken after the `count`-th."""
    lock = model_lock(visit.session.loaded.model)
    for _ in range(count):
        with visit.lock, lock.turn(shown_waits(progress)):
            step = next(steps, None)
        if step is None:
            return
        yield step


def one_at_a_time(handler):
    """`handler(visit, ...)` run with the visit held (`Visit.lock`): no step of the page's run
    changes the run while it reads it. A `visit` that is not a `Visit` (none yet) is passed as it is."""
    @functools.wraps(handler)
    def held(visit, *args, **kwargs):
        if not isinstance(visit, Visit):
            return handler(visit, *args, **kwargs)
        with visit.lock:
            return handler(visit, *args, **kwargs)

    return held
