"""One lock per loaded model: forward passes on a shared model run one at a time, across sessions,
in the order they asked for it.

The order is what makes a shared app fair: a session running 64 tokens asks again after each of its
steps, so it lines up behind every step asked for meanwhile, and another visitor's Next token waits
for the one step in flight and those already in line, not for the whole run (a plain
`threading.Lock` lets the thread that just released it take it again at once). The lock is
reentrant, so a handler may take the model's turn around a step whose runner code takes it again.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_MODEL_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


class FairLock:
    """A reentrant lock handed out first come, first served.

    `with lock:` takes it; `lock.acquire(on_wait)` also reports, while it waits, how many turns are
    ahead of it (the one running and those in line before it), each time that number changes.
    """

    def __init__(self) -> None:
        self._state = threading.Condition(threading.Lock())
        self._line: deque[int] = deque()  # the tickets of the threads waiting, in the order they asked
        self._tickets = itertools.count()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, on_wait: Callable[[int], None] | None = None) -> None:
        """Wait for the turns asked for before this one, then take the lock.

        Args:
            on_wait: called (outside the lock's bookkeeping) with the number of turns ahead, when the
                wait starts and whenever that number falls; not called when the lock is free at once.
        """
        me = threading.get_ident()
        with self._state:
            if self._owner == me:
                self._depth += 1
                return
            ticket = next(self._tickets)
            self._line.append(ticket)
            shown = None
            while (ahead := self._ahead_of(ticket)) > 0:
                if on_wait is not None and ahead != shown:
                    shown = ahead
                    self._state.release()  # the callback may be slow (a page's progress); the line moves meanwhile
                    try:
                        on_wait(ahead)
                    finally:
                        self._state.acquire()
                    continue
                self._state.wait()
            self._line.popleft()
            self._owner, self._depth = me, 1

    def release(self) -> None:
        """Give the lock back (the last of a reentrant holder's releases hands it to the next in line).

        Raises:
            RuntimeError: the calling thread does not hold it.
        """
        with self._state:
            if self._owner != threading.get_ident():
                raise RuntimeError("release of a model lock this thread does not hold")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._state.notify_all()

    @contextlib.contextmanager
    def turn(self, on_wait: Callable[[int], None] | None = None) -> Iterator[None]:
        """`with lock.turn(on_wait):` holds the lock, taken by `acquire(on_wait)`."""
        self.acquire(on_wait)
        try:
            yield
        finally:
            self.release()

    def waiting(self) -> int:
        """Turns asked for and not yet begun."""
        with self._state:
            return len(self._line)

    def _ahead_of(self, ticket: int) -> int:
        return self._line.index(ticket) + (self._owner is not None)

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def model_lock(model: torch.nn.Module) -> FairLock:
    """The lock that serialises forward passes on `model` across sessions, first come, first served."""
    with _LOCKS_GUARD:
        return _MODEL_LOCKS.setdefault(model, FairLock())


def share_turns(other: torch.nn.Module, model: torch.nn.Module) -> None:
    """Let `other` (a copy of `model`, or a view sharing its weights) take turns in `model`'s line: its
    passes run on the same CPU or GPU, so they wait their turn as `model`'s do."""
    lock = model_lock(model)
    with _LOCKS_GUARD:
        _MODEL_LOCKS[other] = lock
