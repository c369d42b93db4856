"""What closed pages leave in the hosted app's memory: the server's RSS after 10 and after 100 pages
opened, run and closed (prints; never asserts).

The app (tests/served_app.py: hosted mode, the tiny Llama, Gradio's heartbeat cut to 0.5 s) runs as
its own process, so its memory is read apart from the clients'. Each cycle is a gradio_client `Client`
(it keeps Gradio's heartbeat, as a browser tab does): a prefill, a decode step, an export, then the
client closes. After each batch the script waits for the closed pages to be noticed, then reads the
server's RSS. Printed: RSS after 10 cycles, after 100, and their ratio (the aim: within 5%).

Run: python benchmarks/bench_closed_pages.py [--cycles 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
from gradio_client import Client

ROOT = Path(__file__).resolve().parents[1]
SETTLE_S = 5  # the last closed pages' heartbeats lapse and their unload events run


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cycle(url: str) -> None:
    client = Client(url, verbose=False, download_files=False)
    client.predict(prompt="Hi there", use_chat_template=False, api_name="/prefill")
    client.predict(api_name="/decode")
    client.predict(api_name="/export")
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "GRADIO_HEARTBEAT_INTERVAL": "0.5"}
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "served_app.py"), str(port)], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "config", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        process, readings = psutil.Process(server.pid), {}
        done = 0
        for mark in (10, args.cycles):
            while done < mark:
                cycle(url)
                done += 1
            time.sleep(SETTLE_S)
            readings[mark] = process.memory_info().rss / 2**20
            print(f"after {mark} cycles: server RSS {readings[mark]:.1f} MiB", flush=True)
        print(f"RSS after {args.cycles} / after 10: {readings[args.cycles] / readings[10]:.3f} "
              f"({readings[args.cycles] - readings[10]:+.1f} MiB)")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
