"""Start the LLM Inference Explorer in the browser: `python app.py [--model ID | --config PRESET]`."""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", help="hub id or local folder of a causal LM (default: the embedded SmolLM2)")
    source.add_argument("--config", help="shape-only: a preset name or a config.json path")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    args = parser.parse_args()

    from explorer.errors import ExplorerError
    from explorer.runner.loading import load
    from explorer.ui.layout import build_demo

    try:
        loaded = load(model=args.model, config=args.config, device=args.device,
                      progress=lambda message: print(message, file=sys.stderr))
    except ExplorerError as exc:
        sys.exit(f"error: {exc}")
    try:
        build_demo(loaded).launch(server_name=args.host, server_port=args.port, ssr_mode=False)
    except OSError as exc:
        sys.exit(f"error: cannot serve on {args.host}:{args.port} ({exc}). Pick another port with --port.")


if __name__ == "__main__":
    main()
