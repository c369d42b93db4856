"""Warm start: seconds from `python app.py` to the page served, and to the model loaded behind it
(prints them; never asserts a time).

The embedded model is already converted (a warm start). Each run starts the launcher on a free port
and polls `GET /` until it answers 200, then waits for the launcher's "Model loaded:" line on stderr
(the model loaded and warmed up: the first step runs at once); the launcher is then stopped.
Medians of --runs runs.

Run: python benchmarks/bench_warm_start.py [--runs 3]
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY = "Model loaded:"  # explorer.ui.launch.READY (not imported: the benchmark times the import)


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_times(port: int, timeout_s: float = 300.0) -> tuple[float, float]:
    """Seconds from starting the launcher until `GET /` on `port` answers 200, and until the model is loaded."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    loaded = threading.Event()
    loaded_after: list[float] = []

    def read_stderr() -> None:  # drained to the end, so the launcher never blocks on a full pipe
        for line in process.stderr:
            if line.startswith(READY) and not loaded.is_set():
                loaded_after.append(time.perf_counter() - start)
                loaded.set()

    threading.Thread(target=read_stderr, daemon=True).start()
    try:
        served = _served_after(port, start, timeout_s)
        if not loaded.wait(max(0.0, timeout_s - served)):
            raise TimeoutError(f"the model was not loaded within {timeout_s:.0f} s")
        return served, loaded_after[0]
    finally:
        process.terminate()
        process.wait(timeout=30)


def _served_after(port: int, start: float, timeout_s: float) -> float:
    while time.perf_counter() - start < timeout_s:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
                if response.status == 200:
                    return time.perf_counter() - start
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"the page was not served within {timeout_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    served, loaded = zip(*(start_times(free_port()) for _ in range(args.runs)), strict=True)
    print(f"warm start -> page served: median {statistics.median(served):.1f} s "
          f"(runs: {', '.join(f'{s:.1f}' for s in served)}; target <= 6 s)")
    print(f"warm start -> model loaded behind it: median {statistics.median(loaded):.1f} s "
          f"(runs: {', '.join(f'{s:.1f}' for s in loaded)})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
