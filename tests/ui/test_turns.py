"""Fair sharing of the model through the handlers (tiny Llama, no server): while one page runs 16
tokens, another page's single Next token waits for at most the step in flight and those already in
line, counted in steps (a wait for the whole run would count about 13), and its status line says how
many steps are ahead of it."""

from __future__ import annotations

import dataclasses
import threading
import time

from test_sessions import VIEW, Request

from explorer.runner.locks import model_lock
from explorer.ui import handlers
from explorer.ui.handlers.turns import waiting_text
from explorer.ui.hosting import HOSTED, Served
from explorer.ui.models import ModelRegistry

RUN_TOKENS = 16  # long enough that a wait for the whole run (its rest: about 13 steps) fails the test
SAMPLED = (True, 1.0, 0, 1.0, 0.0, 7, 128)  # do_sample, temperature, top-k, top-p, min-p, seed, max new tokens
LIMITS = dataclasses.replace(HOSTED, allowed_models=None, max_run_tokens=RUN_TOKENS)
TIMEOUT_S = 60


class Progress:
    """What the handlers see of `gr.Progress`: the descriptions shown on the page's status line."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def __call__(self, fraction, desc: str | None = None, **_) -> None:
        self.shown.append(desc)


def start(served: Served, page: str):
    """The page's visit after a prefill (its first output)."""
    return handlers.ServedHandlers(served).on_prefill_click(
        Request(page, f"10.0.0.{len(served.live) + 1}"), None, served.registry.default_choice, "", "Hi there!", 17,
        False, "", False, False, False, *SAMPLED, *VIEW)[0]


def running(visit, count: int) -> tuple[threading.Thread, list[int]]:
    """A thread running `count` tokens of `visit` through Run N; the steps done after each one."""
    done: list[int] = []

    def run() -> None:
        for _ in handlers.on_run_click(visit, count, *SAMPLED, *VIEW):
            done.append(len(visit.run.steps) - 1)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def wait_for(condition) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_next_token_waits_for_the_steps_ahead_of_it_not_for_a_whole_run(model):
    endless = dataclasses.replace(model, eos_token_ids=[])  # no token ends the run before its 16 steps
    served = Served.create(ModelRegistry(endless), LIMITS)
    runner, other = start(served, "runner"), start(served, "other")
    thread, done = running(runner, RUN_TOKENS)
    wait_for(lambda: len(done) >= 3)
    before = len(done)
    handlers.on_decode_click(other, *SAMPLED, *VIEW, progress=Progress())
    steps_meanwhile = len(done) - before
    thread.join(TIMEOUT_S)
    assert len(done) == RUN_TOKENS and len(other.run.steps) == 2  # the run went on to its end; one step here
    assert steps_meanwhile <= 2, f"the Next token waited for {steps_meanwhile} of the run's steps"


def test_the_status_line_counts_the_steps_ahead_as_they_go(model):
    served = Served.create(ModelRegistry(model), LIMITS)
    runner, other = start(served, "runner"), start(served, "other")
    lock, progress = model_lock(model.model), Progress()
    lock.acquire()  # a step in flight (another page's prefill, say)
    thread, done = running(runner, 2)
    wait_for(lambda: lock.waiting() == 1)  # the run's first step in line
    waiter = threading.Thread(target=handlers.on_decode_click, args=(other, *SAMPLED, *VIEW),
                              kwargs={"progress": progress})
    waiter.start()
    wait_for(lambda: progress.shown == [waiting_text(2)])  # the step in flight and the run's step
    lock.release()
    waiter.join(TIMEOUT_S)
    thread.join(TIMEOUT_S)
    # the count falls to 1 while the run's step runs (unless that step ended before the waiter looked again)
    assert progress.shown in ([waiting_text(2), waiting_text(1)], [waiting_text(2)])
    assert waiting_text(1).endswith("1 step ahead of yours") and waiting_text(3).endswith("3 steps ahead of yours")
    assert len(other.run.steps) == 2 and done == [1, 2]


def test_a_redraw_waits_while_a_step_of_the_pages_run_holds_the_visit(model):
    served = Served.create(ModelRegistry(model), LIMITS)
    visit, drawn = start(served, "page"), threading.Event()

    def redraw() -> None:
        handlers.on_view_change(visit, 0, 1, False, "h100-sxm", "journey")
        drawn.set()

    with visit.lock:  # a step of the page's run, changing the run
        waiter = threading.Thread(target=redraw)
        waiter.start()
        assert not drawn.wait(0.5)  # kept: the point, the redraw does not read the run meanwhile
    waiter.join(TIMEOUT_S)
    assert drawn.is_set()
