"""Regenerate every image the documentation shows, from the app itself.

    python docs/screenshots.py            # all of them (a few minutes on a 2-core CPU)
    python docs/screenshots.py --only forward-prefill lab-prefix

Serves the app in-process on the embedded model (local limits, a free loopback port), drives headless
Chromium (`/usr/bin/chromium` through Playwright) at 1280x720, a lecturer's projector, and writes each
view as WebP (encoded by Chromium's own canvas, quality 0.8) into docs/images/. Everything is found by
elem_id, role and label, and a figure is known to be drawn from its `layout.meta`, never from pixel
positions, so a changed page layout is re-shot by running this again. Prints each file's size and the
total.
"""

from __future__ import annotations

import argparse
import base64
import shutil
import socket
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parent / "images"
WIDTH, HEIGHT = 1280, 720
PROMPT = "Explain what a KV cache holds."
DECODE_STEPS = 3
TIMEOUT_MS = 300_000  # a lab run holds the model: up to minutes on a busy 2-core CPU
WEBP_QUALITY = 0.8
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
DRAWN = """([id, meta]) => { const g = document.querySelector('#' + id + ' .js-plotly-plot');
  return !!(g && g.layout && g.layout.meta && Object.entries(meta).every(([k, v]) => g.layout.meta[k] === v)); }"""
TO_WEBP = """async ([png, quality]) => {
  const image = new Image(); image.src = 'data:image/png;base64,' + png; await image.decode();
  const canvas = document.createElement('canvas'); canvas.width = image.width; canvas.height = image.height;
  canvas.getContext('2d').drawImage(image, 0, 0);
  return canvas.toDataURL('image/webp', quality).split(',')[1]; }"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Shooter:
    """One page of the app and the images written from it."""

    def __init__(self, page, only: set[str] | None) -> None:
        self.page, self.only, self.written = page, only, []

    def wanted(self, name: str) -> bool:
        return not self.only or name in self.only

    def shoot(self, name: str) -> None:
        """The viewport (1280x720) as docs/images/<name>.webp, if wanted."""
        if not self.wanted(name):
            return
        png = base64.b64encode(self.page.screenshot()).decode()
        webp = base64.b64decode(self.page.evaluate(TO_WEBP, [png, WEBP_QUALITY]))
        path = IMAGES / f"{name}.webp"
        path.write_bytes(webp)
        self.written.append(path)
        print(f"{path.name}: {len(webp) / 1024:.0f} KB", flush=True)

    def wait_drawn(self, plot_id: str, **meta) -> None:
        self.page.wait_for_function(DRAWN, arg=[plot_id, meta], timeout=TIMEOUT_MS)


def shoot_steps(shot: Shooter, expect) -> None:
    """The forward pass after Prefill, then every view after DECODE_STEPS decode steps, the lesson and the
    settings."""
    from explorer.ui.layout import PLOT_IDS, VIEW_TITLES

    page = shot.page
    page.locator("#prompt-box textarea").fill(PROMPT)
    page.locator("#prefill-btn").click()
    shot.wait_drawn(PLOT_IDS["forward"], step=0)
    shot.shoot("forward-prefill")
    for step in range(1, DECODE_STEPS + 1):
        page.locator("#decode-btn").click()
        shot.wait_drawn(PLOT_IDS["forward"], step=step)
    for view, title in VIEW_TITLES.items():
        page.get_by_role("tab", name=title, exact=True).click()
        shot.wait_drawn(PLOT_IDS[view], step=DECODE_STEPS)
        shot.shoot(f"view-{view}")
    if shot.wanted("lesson"):
        page.locator("#lesson-btn").click()
        expect(page.locator("#lesson-text")).to_contain_text("Lesson 1 of", timeout=TIMEOUT_MS)
        shot.wait_drawn(PLOT_IDS["forward"])
        shot.shoot("lesson")
        page.locator("#lesson-close").click()
        expect(page.locator("#lesson")).to_be_hidden()
    if shot.wanted("settings"):
        page.locator("#settings .toggle-button").click()
        page.wait_for_function("() => document.querySelector('#settings').getBoundingClientRect().left >= 0")
        page.wait_for_timeout(500)  # the sidebar's slide-in transition
        shot.shoot("settings")
        page.locator("#settings .toggle-button").click()


def shoot_experiments(shot: Shooter, expect) -> None:
    """The "equivalent is not identical" tab and every Lab experiment, each run on the prefilled prompt."""
    from explorer.lab.table import LAB

    page = shot.page
    if shot.wanted("equivalence"):
        page.get_by_role("tab", name="Equivalent ≠ identical").click()
        page.locator("#equivalence-btn").click()
        shot.wait_drawn("equivalence-plot", view="equivalence")
        shot.shoot("equivalence")
    page.get_by_role("tab", name="Lab", exact=True).click()
    for name, experiment in LAB.items():
        if not shot.wanted(f"lab-{name}"):
            continue
        setup = page.locator("#lab-setup")
        if not page.locator("#lab-btn").is_visible():  # folded away after the last run
            setup.get_by_role("button", name="Experiment and its parameters").click()
        page.locator("#lab-select input").click()
        page.get_by_role("option", name=experiment.title).click()
        page.locator("#lab-btn").click()
        shot.wait_drawn("lab-plot", view=f"lab-{name}")
        shot.shoot(f"lab-{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="image names (without .webp) to re-shoot; default: all")
    args = parser.parse_args(argv)
    from playwright.sync_api import expect, sync_playwright

    from explorer.runner.loading import load_model
    from explorer.ui.hosting import LOCAL
    from explorer.ui.layout import build_demo, launch_options

    IMAGES.mkdir(exist_ok=True)
    demo = build_demo(load_model(device="cpu"), limits=LOCAL)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_options(LOCAL))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"http://127.0.0.1:{port}/")
            expect(page.locator("#prefill-btn")).to_be_enabled(timeout=TIMEOUT_MS)
            shot = Shooter(page, set(args.only or ()))
            shoot_steps(shot, expect)
            shoot_experiments(shot, expect)
            browser.close()
    finally:
        demo.close()
    total = sum(path.stat().st_size for path in IMAGES.glob("*.webp"))
    print(f"{len(shot.written)} written; docs/images/ holds {total / 1024:.0f} KB of WebP")
    return 0


if __name__ == "__main__":
    sys.exit(main())
