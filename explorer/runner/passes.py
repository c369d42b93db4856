"""An experiment's forward passes on the shared model, each in a turn of its own.

An experiment (the lab's, "equivalent is not identical") runs tens of forward passes. It takes the
model's first-come, first-served lock (`explorer.runner.locks.model_lock`) for each pass, not for the
whole run, so another page's step waits for the pass in flight and those in line before it. The page
that runs the experiment may show, while a pass waits, how many turns are ahead of it (`waits_shown`).

The seconds a thread has spent waiting for turns are counted (`waited_s`), so an experiment's timed
run can leave out the time it spent waiting for other pages' passes (`explorer.runner.lab.common.median_ms`).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import torch

from explorer.runner.locks import model_lock, share_turns

_ON_WAIT: ContextVar[Callable[[int], None] | None] = ContextVar("explorer_pass_on_wait", default=None)
_WAITED = threading.local()  # .seconds: this thread's total wait for turns


@contextlib.contextmanager
def waits_shown(on_wait: Callable[[int], None] | None) -> Iterator[None]:
    """While the block runs, every `model_pass` of this thread that has to wait calls `on_wait(ahead)`
    (the turns ahead of it: the one running and those in line before it), as `FairLock.acquire` does."""
    token = _ON_WAIT.set(on_wait)
    try:
        yield
    finally:
        _ON_WAIT.reset(token)


@contextlib.contextmanager
def model_pass(model: torch.nn.Module) -> Iterator[None]:
    """One turn on `model`'s lock, without autograd: the pass (or the few that must not be split, such
    as a forward with a hook on the shared model) runs inside the block. Reentrant: a pass inside a
    block already holding the turn takes no second one."""
    lock = model_lock(model)
    began = time.perf_counter()
    lock.acquire(_ON_WAIT.get())
    _WAITED.seconds = waited_s() + time.perf_counter() - began
    try:
        with torch.inference_mode():
            yield
    finally:
        lock.release()


def own_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of `model`, its weights too (an experiment changes the copy's weights or dtype, never
    the shared model's): taken in a turn of the model's, so no other page's traced pass has wrapped its
    modules meanwhile; the copy's passes take turns in the model's line."""
    with model_pass(model):
        copied = copy.deepcopy(model)
    share_turns(copied, model)
    return copied


def waited_s() -> float:
    """The seconds this thread has waited for turns on any model, in all (a clock: subtract two readings)."""
    return getattr(_WAITED, "seconds", 0.0)
