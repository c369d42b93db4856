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
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to serve on (default: $GRADIO_SERVER_NAME or 127.0.0.1)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    args = parser.parse_args()

    from explorer.errors import ExplorerError
    from explorer.runner.loading import load
    from explorer.ui.layout import build_demo, launch_options

    try:
        loaded = load(model=args.model, config=args.config, device=args.device,
                      progress=lambda message: print(message, file=sys.stderr))
    except ExplorerError as exc:
        sys.exit(f"error: {exc}")
    try:
        build_demo(loaded, device=args.device).launch(server_name=args.host, server_port=args.port,
                                                      **launch_options())
    except OSError as exc:
        sys.exit(f"error: cannot serve on {args.host}:{args.port} ({exc}). Pick another port with --port.")


if __name__ == "__main__":
    main()
