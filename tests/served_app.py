"""The app on a loopback port for the session tests, and a plain HTTP client of it.

`PlainClient` speaks Gradio's queue protocol with httpx and nothing else: it never opens the
heartbeat stream and has no timer, as a script or a crawler would (gradio_client opens the
heartbeat, so a closed client is unloaded). `serving` starts an app with any `Limits` and yields its
address and its `Served` (the live sessions), with Gradio's heartbeat cut to 0.5 s so that a closed
browser page is noticed at once.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from contextlib import contextmanager

import httpx
import pytest

from explorer.ui.hosting import Limits, Served
from explorer.ui.layout import build_demo, launch_options

REQUEST_TIMEOUT_S = 30


def build_app(model, limits: Limits):
    """`build_demo(model, limits=limits)` and the `Served` it made (kept by wrapping `Served.create`)."""
    created: list[Served] = []
    create = Served.create
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Served, "create", classmethod(lambda cls, *args: created.append(create(*args)) or created[0]))
        demo = build_demo(model, limits=limits)
    (served,) = created
    return demo, served


@contextmanager
def serving(model, limits: Limits):
    """Serve the app on a free loopback port; yields (url, its `Served`)."""
    demo, served = build_app(model, limits)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.5")
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                    **launch_options(limits))
        try:
            yield f"http://127.0.0.1:{port}/", served
        finally:
            demo.close()


def wait_until(condition, timeout_s: float) -> bool:
    """Poll `condition` every 0.05 s until it holds or `timeout_s` passes; returns whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class PlainClient:
    """One visitor over plain HTTP: its own session hash, no heartbeat, no timer.

    Args:
        url: the app's address.
        address: the visitor's address, sent as `x-forwarded-for` (as a Space's proxy does); None: none.
    """

    def __init__(self, url: str, address: str | None = None) -> None:
        self.url, self.session_hash = url.rstrip("/"), uuid.uuid4().hex[:11]
        headers = {"x-forwarded-for": address} if address else {}
        self.http = httpx.Client(headers=headers, timeout=REQUEST_TIMEOUT_S)
        self.config = self.http.get(f"{self.url}/config").json()

    def join(self, api_name: str, values: dict | None = None) -> httpx.Response:
        """Push one event (`api_name`'s inputs: `values[label]`, else the control's default) without
        waiting for it: Gradio's answer to the push (200 queued, 400 refused with a message, 422 a
        validator's messages, 503 queue full)."""
        dependency = next(d for d in self.config["dependencies"] if d.get("api_name") == api_name)
        props = {c["id"]: c.get("props", {}) for c in self.config["components"]}
        values = values or {}
        data = [values.get(props[i].get("label"), props[i].get("value")) for i in dependency["inputs"]]
        body = {"data": data, "fn_index": dependency["id"], "session_hash": self.session_hash,
                "event_data": None, "trigger_id": dependency["targets"][0][0] if dependency["targets"] else None}
        return self.http.post(f"{self.url}/gradio_api/queue/join", content=json.dumps(body),
                              headers={"content-type": "application/json"})

    def results(self, count: int = 1) -> list[dict]:
        """Read the session's event stream until `count` events have completed; their final messages
        ({"success": ..., "output": {"data": [...]} or {"error": ...}})."""
        done = []
        with self.http.stream("GET", f"{self.url}/gradio_api/queue/data",
                              params={"session_hash": self.session_hash}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if message.get("msg") == "process_completed":
                        done.append(message)
                        if len(done) == count:
                            break
        return done

    def call(self, api_name: str, values: dict | None = None) -> dict:
        """Push one event and wait for it; its final message.

        Raises:
            AssertionError: the push was refused (the message says Gradio's answer).
        """
        pushed = self.join(api_name, values)
        assert pushed.status_code == 200, f"{api_name} refused: {pushed.status_code} {pushed.text[:300]}"
        return self.results()[0]

    def close(self) -> None:
        self.http.close()


def status_of(message: dict) -> str:
    """The status line (the second step output) of a completed step, or its error message."""
    if not message.get("success"):
        return f"error: {message['output'].get('error')}"
    return message["output"]["data"][1]


def main(port: int) -> None:
    """Serve the tiny Llama (512-token context) in hosted mode on `port` until killed, as its own process
    (so a test can read the server's memory apart from its clients')."""
    import threading

    from tiny_models import tiny_model

    from explorer.ui.hosting import HOSTED

    demo = build_demo(tiny_model("llama", max_position_embeddings=512), limits=HOSTED)
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_options(HOSTED))
    threading.Event().wait()


if __name__ == "__main__":
    import sys

    main(int(sys.argv[1]))
