"""A class on the hosted app with the embedded model: N sessions at once, each running 8 decode steps
(Run N tokens), against one session alone (prints; never asserts).

The app is served in hosted mode on a loopback port with room for the class (`--max-sessions 64`).
Each session is a gradio_client `Client` in a thread of its own (as each student's page is): all run
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
import threading
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gradio_client import Client

from explorer.runner.loading import load_model
from explorer.ui.hosting import HOSTED
from explorer.ui.layout import build_demo, launch_options

PROMPT = "Explain in two sentences why the sky is blue."
LIMITS = HOSTED.with_room(sessions=64)  # room for the classes run one after another


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    demo = build_demo(load_model(), limits=LIMITS)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_options(LIMITS))
    url = f"http://127.0.0.1:{port}/"
    print(f"embedded model, hosted mode with {LIMITS.max_sessions} slots; {args.steps} decode steps per session "
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
    demo.close()


if __name__ == "__main__":
    main()
