"""Errors shown to a person as toasts: what happened and what to do, as plain text, never a bare "Error".

A Gradio toast renders its message as HTML, and an event whose message holds a lone UTF-16
surrogate cannot be sent to the page at all (the page then waits for ever), so every message goes
through `toast_text` first. An `ExplorerError` is a message meant for the person; any other
exception is a fault of the explorer: it is logged on one line (the traceback at debug level) and
the person is told what failed and that the session is kept.
"""

from __future__ import annotations

import functools
import inspect
import logging

import gradio as gr

from explorer.errors import ExplorerError

log = logging.getLogger(__name__)
TITLE = "Cannot do that"
FAULT_TITLE = "Something went wrong"
# A toast stays until it is closed: after it, the event's outputs show only Gradio's "Error" mark, so
# a toast that faded (Gradio's default: 10 s) took the reason with it from a person who looked away.
UNTIL_CLOSED = None


def toast_text(message: str) -> str:
    """`message` as plain text a toast can carry: lone surrogates written as escapes, and "&" and "<"
    escaped, which is all it takes for no tag or entity to form (">" and quotes stay readable)."""
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _error(exc: Exception, action: str) -> gr.Error:
    if isinstance(exc, ExplorerError):
        return gr.Error(toast_text(str(exc)), title=TITLE, duration=UNTIL_CLOSED, print_exception=False)
    log.error("%s failed: %s: %s", action, type(exc).__name__, toast_text(str(exc)))
    log.debug("%s failed", action, exc_info=exc)
    return gr.Error(toast_text(f"The explorer could not {action} ({type(exc).__name__}: {exc}). Your session "
                               "and the views are kept; try again, or press Reset to start over."),
                    title=FAULT_TITLE, duration=UNTIL_CLOSED, print_exception=False)


def shows_errors(handler):
    """Turn any exception raised by `handler` (a function or a generator) into a `gr.Error` toast.

    An `ExplorerError` shows its own message; anything else says what the handler was doing, named
    from the handler (`on_export_click` -> "export the run"). Gradio then leaves every output as it was, so the session and the figures on screen are kept.
    """
    action = _action(handler.__name__)
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def wrapped_generator(*args, **kwargs):
            try:
                yield from handler(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a message, none a bare "Error"
                raise _error(exc, action) from exc

        return wrapped_generator

    @functools.wraps(handler)
    def wrapped(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message, none a bare "Error"
            raise _error(exc, action) from exc

    return wrapped


def _action(name: str) -> str:
    """What a handler does, from its name: `on_prefill_click` -> "run the prefill"."""
    verb = name.removeprefix("on_").removesuffix("_click").removesuffix("_change").removesuffix("_upload")
    return ACTIONS.get(verb, f"do that ({verb.replace('_', ' ')})")


ACTIONS = {"prefill": "run the prefill", "decode": "run the decode step", "run": "run those tokens",
           "export": "export the run", "import": "load the saved run", "view": "redraw the view",
           "step": "show that step", "hardware": "redraw the roofline", "select": "draw that view"}
