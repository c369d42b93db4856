"""space/app.py started the way a Space starts it (its own folder, SPACE_ID, Gradio's host and port
variables), then driven in headless Chromium: it serves the embedded model in hosted mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from processes import free_port, wait_until_served

pytestmark = pytest.mark.real_model

SPACE = Path(__file__).resolve().parents[2] / "space"
START_TIMEOUT_S = 120
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def space_url(embedded_cache_dir):
    port = free_port()
    env = {**os.environ, "SPACE_ID": "local/llm-inference-explorer", "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_SERVER_PORT": str(port), "EXPLORER_CACHE_DIR": str(embedded_cache_dir),
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    process = subprocess.Popen([sys.executable, "app.py"], cwd=SPACE, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_served(url, process, START_TIMEOUT_S)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_space_serves_the_embedded_model_in_hosted_mode(new_page, space_url):
    from playwright.sync_api import expect

    page = new_page(space_url, timeout_ms=TIMEOUT_MS)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill", timeout=TIMEOUT_MS)
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in")
    page.locator("#custom-model textarea").fill("../../etc")
    page.locator("#prefill-btn").click()
    expect(page.get_by_test_id("toast-body").last).to_contain_text("This hosted explorer loads only Qwen/Qwen3-0.6B")
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in")  # the session is kept
