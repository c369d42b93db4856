"""When the reader of our output goes away (`llm-explorer trace ... | head`, a log pipe closed under a
running app): the next write raises `BrokenPipeError`. Python's documented answer (the `signal`
module's notes) is to point the standard streams at os.devnull and go on quietly, rather than take
SIGPIPE's default, which would also end a server on any closed socket.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
# A command killed by SIGPIPE (128 + 13) shows this code in the shell; a closed pipe is no error of ours.
CLOSED_PIPE_EXIT = 141


def silence_output() -> None:
    """Point stdout and stderr at os.devnull: nothing more is written, and the interpreter's flush at
    exit raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (captured, closed)
            pass
    os.close(devnull)


def say(message: str, stdout: bool = False) -> None:
    """Print `message` on stderr (on stdout if `stdout`); where nobody reads it any more, silence the
    output and go on."""
    try:
        print(message, file=sys.stdout if stdout else sys.stderr, flush=True)
    except BrokenPipeError:
        silence_output()


def again_if_closed(call: Callable[[], T]) -> T:
    """`call()`; where it meets a closed pipe (a progress bar of transformers' written to a stderr
    nobody reads), the output silenced and `call()` once more, which then writes nowhere."""
    try:
        return call()
    except BrokenPipeError:
        silence_output()
        return call()
