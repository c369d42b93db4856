"""space/app.py started the way a Space starts it (its own folder, SPACE_ID, Gradio's host and port
variables), with the files its build preloads (README.md's `preload_from_hub`) placed where the Space
has them: a Hugging Face hub cache (`$HF_HOME/hub/models--ORG--NAME/refs/main` and `snapshots/HASH/`).
No network and no conversion: the test does not switch the hub off (the app does it itself), points
the hub's address at a local server that counts the requests it gets (none may come), and leaves the
explorer's own cache empty (no GGUF is converted).

The cache holds the embedded SmolLM2-135M-Instruct (the locally converted float32 files: the same
architecture, tokenizer and chat template as the original safetensors a Space preloads) and, as
Qwen/Qwen3-0.6B, a tiny random Qwen3 whose chat template has Qwen3's thinking switch.
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from gradio_client import Client
from processes import free_port, wait_until_served
from tiny_models import QWEN3_CHAT_TEMPLATE, char_tokenizer, tiny_config
from transformers import AutoModelForCausalLM, GenerationConfig

pytestmark = pytest.mark.real_model

SPACE = Path(__file__).resolve().parents[2] / "space"
START_TIMEOUT_S = 120
TIMEOUT_MS = 60_000
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"  # a commit hash, as the cache names a snapshot
EMBEDDED = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN3 = "Qwen/Qwen3-0.6B"


def snapshot_folder(hf_home: Path, repo_id: str) -> Path:
    """Make `repo_id`'s cache entry under `hf_home` (huggingface_hub's layout) and return its snapshot folder."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    folder = repo / "snapshots" / SNAPSHOT
    folder.mkdir(parents=True)
    return folder


def preloaded_hub(hf_home: Path, embedded_folder: Path) -> Path:
    """The hub cache a Space's build leaves: both models of its README's preload_from_hub."""
    folder = snapshot_folder(hf_home, EMBEDDED)
    for path in embedded_folder.iterdir():
        if path.name != "manifest.json":
            (folder / path.name).symlink_to(path)  # the cache's snapshots hold links to its blobs
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("qwen3"))
    model.generation_config = GenerationConfig(eos_token_id=1, pad_token_id=0)
    tokenizer = char_tokenizer()
    tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    qwen3_folder = snapshot_folder(hf_home, QWEN3)
    model.save_pretrained(qwen3_folder)
    tokenizer.save_pretrained(qwen3_folder)
    return hf_home


class Hub(http.server.BaseHTTPRequestHandler):
    """A stand-in for the hub's address that records every request and answers none usefully."""

    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - the name http.server calls
        self.requests.append(self.path)
        self.send_error(503)

    do_HEAD = do_GET

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture(scope="module")
def hub_address():
    """The address of a `Hub` on loopback; its `requests` are the hub calls made so far."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def start_space(hf_home: Path, explorer_cache: Path, port: int, hub: str) -> subprocess.Popen:
    """`python app.py` in space/, as a Space runs it; the test environment's hub switch removed and the
    hub's address pointed at `hub`."""
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "PYTHONPATH")}
    env |= {"SPACE_ID": "local/llm-inference-explorer", "GRADIO_SERVER_NAME": "127.0.0.1",
            "GRADIO_SERVER_PORT": str(port), "HF_HOME": str(hf_home), "EXPLORER_CACHE_DIR": str(explorer_cache),
            "GRADIO_ANALYTICS_ENABLED": "False", "HF_ENDPOINT": hub}
    return subprocess.Popen([sys.executable, "app.py"], cwd=SPACE, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def space_url(embedded_cache_dir, hub_address, tmp_path_factory):
    from explorer.runner.embedded import ensure_converted

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_CACHE_DIR", str(embedded_cache_dir))
        embedded_folder = ensure_converted()
    hf_home = preloaded_hub(tmp_path_factory.mktemp("hf-home"), embedded_folder)
    port = free_port()
    process = start_space(hf_home, tmp_path_factory.mktemp("explorer-cache"), port, hub_address)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_served(url, process, START_TIMEOUT_S)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def prompt_tokens(client: Client, values: dict) -> int:
    """A prefill through the API; returns the prompt's token count the status line gives."""
    parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/prefill"]["parameters"]
    outputs = client.predict(*[values.get(p["label"], p["parameter_default"]) for p in parameters], api_name="/prefill")
    status = next(o for o in outputs if isinstance(o, str) and "token(s) in" in o)
    return int(re.search(r"(\d+) token\(s\) in", status).group(1))


def test_the_space_serves_qwen3_from_the_preloaded_cache_with_thinking_off_unless_ticked(space_url):
    client = Client(space_url, verbose=False)
    try:
        qwen3 = {"Model": QWEN3, "Prompt": "Hi"}
        off = prompt_tokens(client, qwen3)
        on = prompt_tokens(client, qwen3 | {"Thinking (Qwen3's enable_thinking)": True})
    finally:
        client.close()
    assert off - on == len("<think>  </think>  ")  # one token per character: the closed think block
    assert Hub.requests == []  # the models came from the cache alone


def test_the_space_serves_the_embedded_model_in_hosted_mode(new_page, space_url):
    from playwright.sync_api import expect

    page = new_page(space_url, timeout_ms=TIMEOUT_MS)
    expect(page.locator("#model-select")).to_contain_text(EMBEDDED)
    page.locator("#prefill-btn").click()
    expect(page.locator("#status")).to_contain_text("prefill", timeout=TIMEOUT_MS)
    page.locator("#decode-btn").click()
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in")
    page.locator("#custom-model textarea").fill("../../etc")
    page.locator("#prefill-btn").click()
    expect(page.get_by_test_id("toast-body").last).to_contain_text("This hosted explorer loads only Qwen/Qwen3-0.6B")
    expect(page.locator("#status")).to_contain_text("step 1: 1 token(s) in")  # the session is kept


def test_a_space_without_its_preloaded_files_stops_at_once_naming_the_missing_model(tmp_path, hub_address):
    process = start_space(tmp_path / "empty-hf-home", tmp_path / "explorer-cache", free_port(), hub_address)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert f"error: {EMBEDDED} is not in the Hugging Face cache" in output and "preload_from_hub" in output
    assert "Traceback" not in output and Hub.requests == []
