"""Warm start: seconds from `python app.py` to the page served (prints them; never asserts a time).

The embedded model is already converted (a warm start). Each run starts the launcher on a free port
and polls `GET /` until it answers 200; the launcher is then stopped. Medians of --runs runs.

Run: python benchmarks/bench_warm_start.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def served_after(port: int, timeout_s: float = 300.0) -> float:
    """Seconds from starting the launcher until `GET /` on `port` answers 200."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < timeout_s:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
                    if response.status == 200:
                        return time.perf_counter() - start
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"the page was not served within {timeout_s:.0f} s")
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores)")
    seconds = [served_after(free_port()) for _ in range(args.runs)]
    print(f"warm start -> page served: median {statistics.median(seconds):.1f} s "
          f"(runs: {', '.join(f'{s:.1f}' for s in seconds)}; target <= 6 s)")


if __name__ == "__main__":
    main()
