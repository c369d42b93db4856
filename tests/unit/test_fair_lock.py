"""The model's lock hands turns out first come, first served, says how many turns are ahead while one
waits, and lets a holder take it again; a run that asks again after each step lines up behind
whoever asked meanwhile. Threads are lined up one at a time (each waits until the previous one is in
line), so the orders asserted are the lock's, not the scheduler's."""

from __future__ import annotations

import threading
import time

import pytest

from explorer.runner.locks import FairLock

TIMEOUT_S = 10


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def line_up(lock: FairLock, name: str, order: list[str], on_wait=None, done: threading.Event | None = None
            ) -> threading.Thread:
    """A thread that takes `lock` (records `name` in `order` once it holds it) and gives it back (once
    `done` is set, if given); it returns once the thread waits in line."""
    waiting = lock.waiting()

    def take() -> None:
        lock.acquire(on_wait)
        order.append(name)
        if done is not None:
            done.wait(TIMEOUT_S)
        lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    assert wait_until(lambda: lock.waiting() == waiting + 1, TIMEOUT_S)
    return thread


def test_turns_are_handed_out_in_the_order_asked():
    lock, order = FairLock(), []
    lock.acquire()
    threads = [line_up(lock, name, order) for name in "abcdef"]
    assert order == []  # nobody passed the holder
    lock.release()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert order == list("abcdef")


def test_a_waiting_turn_is_told_how_many_are_ahead_as_the_line_moves():
    lock, order, shown = FairLock(), [], []
    done = {name: threading.Event() for name in ("run-step", "redraw")}
    lock.acquire()  # the step in flight
    ahead = [line_up(lock, name, order, done=done[name]) for name in ("run-step", "redraw")]
    mine = line_up(lock, "next-token", order, on_wait=shown.append)
    assert wait_until(lambda: shown == [3], TIMEOUT_S)  # the one running and the two in line
    lock.release()
    assert wait_until(lambda: shown == [3, 2], TIMEOUT_S)  # the run's step running, the redraw in line
    done["run-step"].set()
    assert wait_until(lambda: shown == [3, 2, 1], TIMEOUT_S)  # the redraw running
    done["redraw"].set()
    for thread in (*ahead, mine):
        thread.join(TIMEOUT_S)
    assert order == ["run-step", "redraw", "next-token"]


def test_a_free_lock_is_taken_at_once_without_a_wait_shown():
    lock, shown = FairLock(), []
    with lock.turn(shown.append):
        pass
    assert shown == [] and lock.waiting() == 0


def test_the_holder_takes_it_again_and_others_wait_for_its_last_release():
    lock, order = FairLock(), []
    lock.acquire()
    with lock:  # a step's runner code taking the turn its handler holds
        other = line_up(lock, "other", order)
    assert order == []  # still held once
    lock.release()
    other.join(TIMEOUT_S)
    assert order == ["other"]


def test_a_run_that_asks_again_after_each_step_lines_up_behind_a_step_asked_meanwhile():
    lock, order = FairLock(), []
    lock.acquire()  # the run's step 1
    other = line_up(lock, "next-token", order)
    lock.release()
    with lock:  # the run asks again at once, and goes behind the one in line
        order.append("run-step-2")
    other.join(TIMEOUT_S)
    assert order == ["next-token", "run-step-2"]


def test_only_the_holder_may_release():
    lock = FairLock()
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()
