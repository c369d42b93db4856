"""The app in headless Chromium on the embedded model: click "Next token" -> the visible figure and
the status redrawn, and the bytes the browser receives per step (prints; never asserts a time).

For each view tab, `--steps` clicks on Next token with that tab open; the time is from the click
to the moment the tab's figure carries the new step in `layout.meta` and the status names it (only
the view on screen is drawn per step). Bytes are what Chromium's network layer reports received
(Network.dataReceived over CDP) between the click and that moment: the step's whole event stream.
Targets: p50 <= 1.0 s per click, <= 500 KB per step; the Forward pass view p50 <= 0.5 s, <= 300 KB.
With --prompt-tokens N the prompt is N tokens of plain text (the chat template adds its own, about 30;
the app is served with a prompt limit that takes them, 2,048 tokens or more) and the prefill's time is
printed: the Attention tab's p50 at 2,048 tokens is the issue's other target (`--prompt-tokens 2010
--views attention`); `--prompt-tokens 8150` fills the embedded model's 8,192-token context (11 decode
steps then fit: the steps per view are cut so that every click gets its step).

Run: python benchmarks/bench_app_browser.py [--steps 8] [--prompt-tokens N] [--views attention ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import socket
import statistics
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_runner import prompt_of
from playwright.sync_api import sync_playwright

from explorer.runner.loading import load_model
from explorer.ui.hosting import LOCAL
from explorer.ui.layout import PLOT_IDS, VIEW_TITLES, build_demo, launch_options

PROMPT = "Write a long story about a lighthouse keeper and her cat."  # long enough not to end early
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
DRAWN_AT = """([id, step]) => document.querySelector('#' + id + ' .js-plotly-plot')?.layout?.meta?.step === step"""
SHOWS_STEP = f"""([id, step]) => ({DRAWN_AT})([id, step])
                 && document.querySelector('#status').innerText.includes('step ' + step + ':')"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8, help="clicks per view (6 views x steps <= 63, the app's "
                        "default max new tokens)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="a plain-text prompt of this many tokens")
    parser.add_argument("--views", nargs="+", choices=list(PLOT_IDS), default=list(PLOT_IDS), help="the tabs timed")
    args = parser.parse_args()
    loaded = load_model()
    prompt = PROMPT if args.prompt_tokens is None else prompt_of(loaded.tokenizer, args.prompt_tokens)
    limit = max(LOCAL.max_prompt_tokens, (args.prompt_tokens or 0) + 64)  # room for the chat template
    demo = build_demo(loaded, limits=dataclasses.replace(LOCAL, max_prompt_tokens=limit))
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_options())
    received = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        cdp = page.context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.on("Network.dataReceived", lambda event: received.append(event["dataLength"]))
        page.goto(f"http://127.0.0.1:{port}/")
        page.locator("#prompt-box textarea").fill(prompt)
        start = time.perf_counter()
        page.locator("#prefill-btn").click()
        page.wait_for_function("() => document.querySelector('#status').innerText.includes('prefill:')",
                               timeout=600_000)
        status = page.locator("#status").inner_text()
        print(f"prefill {time.perf_counter() - start:.1f} s: {status[:120]}")
        # the prefill chose one token; a decode step adds one more until the model's context is full
        room = loaded.model.config.max_position_embeddings - int(re.search(r"context n = (\d+)", status)[1]) - 1
        steps = min(args.steps, room // len(args.views))
        if steps < args.steps:
            print(f"{room} decode steps fill the context: {steps} per view")
        views = args.views if steps else []  # not one step per view: the prefill's time alone
        step = 0
        print(f"{'view':<10} {'p50 s':>7} {'max s':>7} {'KB/step p50':>12} {'KB/step max':>12}")
        for view in views:
            plot_id = PLOT_IDS[view]
            page.get_by_role("tab", name=VIEW_TITLES[view], exact=True).click()
            page.wait_for_function(DRAWN_AT, arg=[plot_id, step], timeout=600_000)  # the tab's own draw first
            times, sizes = [], []
            for _ in range(steps):
                step += 1
                received.clear()
                start = time.perf_counter()
                page.locator("#decode-btn").click()
                page.wait_for_function(SHOWS_STEP, arg=[plot_id, step], timeout=60_000)
                times.append(time.perf_counter() - start)
                sizes.append(sum(received) / 1e3)
            print(f"{view:<10} {statistics.median(times):7.2f} {max(times):7.2f} "
                  f"{statistics.median(sizes):12.1f} {max(sizes):12.1f}")
        browser.close()
    demo.close()


if __name__ == "__main__":
    main()
