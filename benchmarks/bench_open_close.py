"""Pages opened and closed against the hosted app on the embedded model: the sessions it still holds
and the server's memory (RSS) before, at its peak and after (prints; never asserts).

Each cycle opens a fresh page in headless Chromium, runs the prefill of a short prompt, and closes
the page; every `--early-close`-th cycle closes it while its prefill is still running (the case that
leaked slots). After the last cycle the script waits for the closed pages to be noticed, then prints
the live sessions (0 is the target), and RSS before the first cycle, the peak during the cycles and
the RSS after (the target: back within a few tens of MB of where it started once the sessions are
freed; Gradio itself keeps each closed page's state records, bounded by `state_session_capacity`).

Run: python benchmarks/bench_open_close.py [--cycles 200] [--early-close 4]
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import threading
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_HEARTBEAT_INTERVAL", "1")  # a closed page is noticed within a second

import psutil
from playwright.sync_api import sync_playwright

from explorer.runner.loading import load_model
from explorer.ui.hosting import HOSTED, Served
from explorer.ui.layout import build_demo, launch_options

PROMPT = "What is the capital of France? Answer in one word."
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
SETTLE_S = 15  # time for the last pages' unload events to run


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PeakRSS(threading.Thread):
    """Samples this process's RSS every 50 ms; `peak_mb` is the largest seen."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.process, self.peak_mb, self.running = psutil.Process(), 0.0, True

    def run(self) -> None:
        while self.running:
            self.peak_mb = max(self.peak_mb, rss_mb(self.process))
            time.sleep(0.05)


def rss_mb(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def built_app():
    """The hosted app on the embedded model, and the `Served` it made (its live sessions)."""
    created: list[Served] = []
    create = Served.create
    Served.create = classmethod(lambda cls, *args: created.append(create(*args)) or created[0])
    try:
        demo = build_demo(load_model(), limits=HOSTED)
    finally:
        Served.create = create
    return demo, created[0]


def cycle(browser, url: str, early: bool) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(url)
    page.locator("#prompt-box textarea").fill(PROMPT)
    page.locator("#prefill-btn").click()
    if not early:
        page.wait_for_function("() => document.querySelector('#status').innerText.includes('prefill')",
                               timeout=60_000)
    page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--early-close", type=int, default=4, help="every k-th page closes during its prefill")
    args = parser.parse_args()
    demo, served = built_app()
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_options(HOSTED))
    url = f"http://127.0.0.1:{port}/"
    process = psutil.Process()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        cycle(browser, url, early=False)  # warm-up: the first prefill and page load are not counted
        time.sleep(SETTLE_S)
        gc.collect()
        before_mb = rss_mb(process)
        peak = PeakRSS()
        peak.start()
        start = time.perf_counter()
        for i in range(args.cycles):
            cycle(browser, url, early=args.early_close > 0 and i % args.early_close == 0)
        elapsed_s = time.perf_counter() - start
        time.sleep(SETTLE_S)
        peak.running = False
        browser.close()
    gc.collect()
    after_mb = rss_mb(process)
    print(f"cycles: {args.cycles} in {elapsed_s:.0f} s ({args.cycles // max(args.early_close, 1)} closed "
          "during their prefill)")
    print(f"sessions held after: {len(served.live)} (of at most {HOSTED.max_sessions}); page states Gradio still "
          f"keeps: {len(demo.app.state_holder.session_data)} (it keeps a closed page's for an hour, at most "
          f"{launch_options(HOSTED)['state_session_capacity']})")
    print(f"RSS: before {before_mb:.0f} MB, peak {peak.peak_mb:.0f} MB, after {after_mb:.0f} MB "
          f"({after_mb - before_mb:+.0f} MB)")
    demo.close()


if __name__ == "__main__":
    main()
