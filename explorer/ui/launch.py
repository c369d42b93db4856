"""The app's command line: load the model, build the app, serve it (`python app.py`, `llm-explorer app`,
`space/app.py`).

Start-up overlaps its two slow halves on the machine's cores: once torch, transformers and the runner
are imported, a thread loads (and warms up) the model while the main thread imports Gradio and the
app's modules; the app is built once both are done. The runner is imported before the thread starts:
transformers imports its parts lazily, and two threads importing them at once can fail.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


DESCRIPTION = ("Start the LLM Inference Explorer in the browser: type a prompt, then step through the model's "
               "prefill and decode steps, with every tensor shape, the attention, the KV cache, the sampling "
               "and the roofline. Open the address it prints (http://127.0.0.1:7860 by default).")


def parser() -> argparse.ArgumentParser:
    """The launcher's options (`python app.py`)."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the app's options to `parser` (`python app.py` and `llm-explorer app` share them)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", help="hub id or local folder of a causal LM (default: the embedded SmolLM2)")
    source.add_argument("--config", help="shape-only: a preset name or a config.json path")
    parser.add_argument("--device", default="auto", help="auto (CUDA, then Apple MPS, then CPU), cpu, cuda[:N] or mps")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                        help="auto: bfloat16 on CUDA (float16 where it lacks bfloat16), float32 on CPU and MPS")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to serve on (default: $GRADIO_SERVER_NAME or 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    parser.add_argument("--hosted", action="store_true", default=None,
                        help="hosted mode: allow-listed models only, shorter prompts and runs, bounded queue "
                             "(on by itself where $SPACE_ID is set, as on Hugging Face Spaces)")
    parser.add_argument("--max-prompt-tokens", type=int, help="longest prompt the app accepts (default 2048; "
                        "hosted 512)")


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is in 1..65535, not {port}")
    return port


def main(argv: list[str] | None = None) -> None:
    """Parse `argv` (default: the command line), load the model and serve the app until interrupted."""
    serve(parser().parse_args(argv))


def serve(args: argparse.Namespace) -> None:
    """Load the model `args` names and serve the app until interrupted.

    Exits with a one-line "error: ..." message when the installed package lacks a file the page
    reads (checked before any model work), the model cannot be loaded or the port is taken.
    """
    if args.max_prompt_tokens is not None and args.max_prompt_tokens < 1:
        sys.exit("error: --max-prompt-tokens must be at least 1")
    from explorer.errors import ExplorerError
    from explorer.ui.static import check_assets

    try:
        check_assets()  # before any model work: a broken install is said as such
    except ExplorerError as exc:
        sys.exit(f"error: {exc}")
    import explorer.runner.probe
    import explorer.runner.sampling
    import explorer.runner.session  # noqa: F401  (torch and transformers, before the loading thread)

    loading = _Loading(args)
    loading.start()

    from explorer.ui.hosting import limits_for
    from explorer.ui.layout import build_demo, launch_options  # Gradio's import, beside the model's load

    limits = limits_for(args.hosted)
    if args.max_prompt_tokens is not None:
        limits = dataclasses.replace(limits, max_prompt_tokens=args.max_prompt_tokens)
    loading.join()
    if isinstance(loading.error, ExplorerError):
        sys.exit(f"error: {loading.error}")
    if loading.error is not None:
        raise loading.error
    loaded, device = loading.loaded, loading.device
    try:
        demo = build_demo(loaded, device=device, limits=limits)
        demo.launch(server_name=args.host, server_port=args.port, **launch_options(limits))
    except OSError as exc:
        sys.exit(f"error: cannot serve on {args.host}:{args.port} ({exc}). Pick another port with --port.")


class _Loading(threading.Thread):
    """Picks the device and loads the model of `args` (`explorer.runner.loading.load`), its progress
    on stderr; afterwards `loaded` and `device` are set, or `error` is what the load raised."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(name="explorer-model-load", daemon=True)
        self.args = args
        self.loaded = self.device = self.error = None

    def run(self) -> None:
        from explorer.runner.devices import pick_device
        from explorer.runner.loading import load

        args = self.args
        try:
            self.device = pick_device(args.device)
            self.loaded = load(model=args.model, config=args.config, device=self.device, dtype=args.dtype,
                               progress=lambda message: print(message, file=sys.stderr))
        except BaseException as exc:  # handed to the main thread, which exits with it
            self.error = exc
