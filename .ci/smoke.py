"""CI's smoke test of an environment (the lowest versions pyproject.toml allows): `llm-explorer trace`
on the embedded model, converted afresh from its GGUF into an empty cache, then `llm-explorer app` started
as a person starts it, and a Prefill and a Next token through gradio_client. Exits non-zero on the first
failure, with what the command printed."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from processes import free_port, wait_until_served  # noqa: E402

START_TIMEOUT_S = 300  # the page first, then the model (loaded from the cache the trace filled) and the warm-up


def main() -> None:
    env = os.environ | {"EXPLORER_CACHE_DIR": tempfile.mkdtemp(prefix="explorer-smoke-")}
    trace = subprocess.run(["llm-explorer", "trace", "The capital of France is", "--steps", "2"], env=env,
                           capture_output=True, text=True, timeout=600)
    assert trace.returncode == 0 and "decode" in trace.stdout, trace.stdout + trace.stderr
    print("trace: ok")

    from gradio_client import Client

    port = free_port()
    app = subprocess.Popen(["llm-explorer", "app", "--port", str(port)], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_served(url, app, START_TIMEOUT_S)
        client = Client(url, verbose=False)
        prefill = client.predict(prompt="The capital of France is", use_chat_template=False, api_name="/prefill")
        decode = client.predict(api_name="/decode")
        client.close()
        shown = lambda outputs, text: any(text in str(value) for value in outputs)  # noqa: E731
        assert shown(prefill, "**prefill**") and shown(prefill, "Paris"), prefill  # greedy: the capital
        assert shown(decode, "**step 1**"), decode
        print("served Prefill and Next token: ok")
    finally:
        app.terminate()
        print(app.communicate(timeout=60)[0][-3000:])


if __name__ == "__main__":
    main()
