"""An app started as its own process (a Space's start, an installed command): a free loopback port,
and waiting until the page is served; and what a test of processes started by the code under test
checks they left: this process's live descendants, and a port still listened on."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request

import psutil


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


def children() -> set[int]:
    """The pids of this process's live descendants, less multiprocessing's resource tracker (it lives as
    long as we do)."""
    return {child.pid for child in psutil.Process().children(recursive=True)
            if child.is_running() and "resource_tracker" not in " ".join(child.cmdline())}


def listening(port: int) -> list:
    """The TCP sockets listening on `port` now."""
    return [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
            and c.status == psutil.CONN_LISTEN]


def recorded_ports(monkeypatch, runner) -> list[int]:
    """The loopback ports `runner` (a lab runner's module) picks from now on, recorded as it picks them."""
    ports: list[int] = []
    real_port = runner.free_loopback_port
    monkeypatch.setattr(runner, "free_loopback_port", lambda: ports.append(real_port()) or ports[-1])
    return ports
