"""An app started as its own process (a Space's start, an installed command): a free loopback port,
and waiting until the page is served."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_served(url: str, process: subprocess.Popen, timeout_s: float) -> None:
    """Poll `url` until it answers 200.

    Raises:
        AssertionError: the process exited first (with what it printed), or `timeout_s` passed.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{process.args} exited with {process.returncode}: {process.stdout.read()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)  # a poll: the next try at the port (a process outside the browser, no `expect`)
    raise AssertionError(f"{process.args} did not serve {url} within {timeout_s} s")
