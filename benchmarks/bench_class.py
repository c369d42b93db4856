"""A class on the hosted app with the embedded model: N sessions at once, each running 8 decode steps
(Run N tokens), against one session alone (prints; never asserts).

The app is served as its own process (`app.py --hosted --max-sessions 64`, the embedded model), on a
loopback port, so the clients do not share its interpreter. Each session is a gradio_client
`Client` in a thread of its own here (as each student's page is), from its own address: all run
their prefill, then, at one signal, all press Run 8 tokens. A step's latency is the time from the
previous step's output (or the click) to its own output reaching the client, so it includes waiting
for the other sessions' steps in the model's line, the step itself, its figure and the transfer.
Printed per class size: the per-step latency p50 and p95, the total tokens per second over the run,
and both against one session alone.

Run: python benchmarks/bench_class.py [--sessions 1 10 30] [--steps 8]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from gradio_client import Client

ROOT = Path(__file__).resolve().parents[1]
READY = "Model loaded:"  # explorer.ui.launch.READY, on the app's stderr once the model is loaded
PROMPT = "Explain in two sentences why the sky is blue."
SLOTS = 64  # room for the classes run one after another


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(port: int) -> subprocess.Popen:
    """The app in hosted mode on `port`, as its own process, once its model is loaded."""
    env = os.environ | {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--hosted", "--max-sessions", str(SLOTS),
                                "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if line.startswith(READY):
            threading.Thread(target=process.stderr.read, daemon=True).start()  # keep its pipe drained
            return process
    raise SystemExit(f"the app exited before loading its model ({process.wait()})")


def student(url: str, address: str, steps: int, go: threading.Event, ready: threading.Barrier,
            latencies_s: list[float]) -> None:
    """One session from `address`: its prefill, then (once every session is ready) Run `steps` tokens,
    each output's latency appended to `latencies_s`."""
    client = Client(url, verbose=False, headers={"x-forwarded-for": address})
    try:
        client.predict(prompt=PROMPT, use_chat_template=True, custom_model="", api_name="/prefill")
        ready.wait()
        go.wait()
        last = time.perf_counter()
        for _ in client.submit(count=steps, api_name="/run"):
            now = time.perf_counter()
            latencies_s.append(now - last)
            last = now
    finally:
        client.close()


def run_class(url: str, sessions: int, steps: int) -> tuple[list[float], float]:
    """`sessions` students each running `steps` steps at once: every step's latency (s) and the run's wall time (s)."""
    go, ready, latencies_s = threading.Event(), threading.Barrier(sessions + 1), []
    threads = [threading.Thread(target=student, args=(url, f"10.{sessions}.0.{i}", steps, go, ready, latencies_s))
               for i in range(sessions)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    return latencies_s, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 10, 30])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    port = free_port()
    server = serve(port)
    url = f"http://127.0.0.1:{port}/"
    print(f"embedded model, hosted mode with {SLOTS} slots; {args.steps} decode steps per session "
          f"(Run {args.steps} tokens), all sessions at once; {os.cpu_count()} CPU cores")
    print(f"{'sessions':>8} {'steps':>6} {'p50 step s':>11} {'p95 step s':>11} {'tokens/s':>9} "
          f"{'p50 vs alone':>13} {'tokens/s vs alone':>18}")
    alone = None
    for sessions in args.sessions:
        latencies_s, wall_s = run_class(url, sessions, args.steps)
        p50, p95 = statistics.median(latencies_s), statistics.quantiles(latencies_s, n=20)[-1]
        rate = len(latencies_s) / wall_s
        alone = alone or (p50, rate)
        print(f"{sessions:>8} {len(latencies_s):>6} {p50:>11.3f} {p95:>11.3f} {rate:>9.2f} "
              f"{p50 / alone[0]:>12.1f}x {rate / alone[1]:>17.2f}x")
    server.terminate()


if __name__ == "__main__":
    main()
