"""Every failure a handler meets is a toast that says what happened and what to do: text that cannot
form HTML, that the page can receive (no lone surrogate), never a bare "Error" and never a traceback
in the log above debug level."""

from __future__ import annotations

import logging

import gradio as gr
import orjson
import pytest

from explorer.ui import handlers
from explorer.ui.toasts import FAULT_TITLE, TITLE, toast_text

GREEDY = (False, 1.0, 0, 1.0, 0.0, 0, 8)  # do_sample, temperature, top-k, top-p, min-p, seed, max new tokens
VIEW = (0, False, "h100-sxm", "sampling")  # layer, average heads, roofline hardware, the view on screen


def prefill(served, custom=""):
    return handlers.ServedHandlers(served).on_prefill_click(
        None, None, served.registry.default_choice, custom, "Hi there", 17, False, "", False, False, False, *GREEDY, *VIEW)


@pytest.mark.parametrize("text, shown", [
    ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)>"),
    ("a & b <b>c</b>", "a &amp; b &lt;b>c&lt;/b>"),
    ("top-k must be >= 0 ('k')", "top-k must be >= 0 ('k')"),
    ("bad \ud800 id", "bad \\ud800 id"),
])
def test_toast_text_forms_no_tag_and_can_be_sent(text, shown):
    assert toast_text(text) == shown
    orjson.dumps(toast_text(text))  # what Gradio does to send it; a lone surrogate raised here before


@pytest.mark.parametrize("custom, shown", [
    ("<img src=x onerror=alert(1)>", "Cannot find '&lt;img src=x onerror=alert(1)>'"),
    ("\ud800", "Cannot find '\\ud800'"),  # a lone surrogate in the model field froze the page
])
def test_a_hostile_model_id_is_a_plain_text_message_the_page_can_receive(served, custom, shown):
    with pytest.raises(gr.Error) as caught:
        prefill(served, custom)
    assert caught.value.title == TITLE and caught.value.message.startswith(shown)
    assert caught.value.duration is None  # shown until closed: the reason does not fade from the page
    assert "<img" not in caught.value.message
    orjson.dumps(caught.value.message)


def test_an_unexpected_fault_says_what_failed_keeps_the_session_and_logs_one_line(served, monkeypatch, caplog):
    visit, *_ = prefill(served)

    def broken_step(settings=None):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(visit.session, "decode_step", broken_step)
    with caplog.at_level(logging.INFO, logger="explorer.ui.toasts"), pytest.raises(gr.Error) as caught:
        handlers.on_decode_click(visit, *GREEDY, *VIEW)
    assert caught.value.title == FAULT_TITLE and caught.value.duration is None
    assert caught.value.message == ("The explorer could not run the decode step (ZeroDivisionError: division by "
                                    "zero). Your session and the views are kept; try again, or press Reset to "
                                    "start over.")
    assert [r.getMessage() for r in caplog.records] == ["run the decode step failed: ZeroDivisionError: "
                                                        "division by zero"]
    assert caplog.records[0].exc_info is None  # the traceback goes to debug only
    assert len(visit.run.steps) == 1


def test_an_unexpected_fault_in_a_run_of_n_tokens_keeps_the_steps_taken(served, monkeypatch):
    visit, *_ = prefill(served)
    real_step, calls = visit.session.decode_step, []

    def step_then_fail(settings=None):
        calls.append(settings)
        if len(calls) == 3:
            raise MemoryError()
        return real_step(settings)

    monkeypatch.setattr(visit.session, "decode_step", step_then_fail)
    with pytest.raises(gr.Error, match=r"could not run those tokens \(MemoryError: \)"):
        list(handlers.on_run_click(visit, 5, *GREEDY, *VIEW))
    assert len(visit.run.steps) == 3  # the prefill and the two steps before the fault
