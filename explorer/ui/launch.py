"""The app's command line: load the model, build the app, serve it (`python app.py`, `llm-explorer app`,
`space/app.py`).

The page is served before the model is loaded: Gradio and the app's modules import no torch, so the
server is up in a few seconds; a thread then imports torch, transformers and the runner and loads
(and warms up) the model, while the page says it is loading and the model's events wait for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import traceback
from typing import TYPE_CHECKING

from explorer.analysis.precision import DTYPE_CHOICES
from explorer.cli.options import MODEL_ENVIRONMENT, HelpFormatter, whole
from explorer.closed_pipe import again_if_closed, say
from explorer.ui.hosting import PER_ADDRESS_VARIABLE, SESSIONS_VARIABLE

if TYPE_CHECKING:
    from explorer.runner.loading import LoadedModel

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

READY = "Model loaded:"  # the line on stderr once the start-up model is loaded and warmed up


DESCRIPTION = ("Start the LLM Inference Explorer in the browser: type a prompt, then step through the model's "
               "prefill and decode steps, with every tensor shape, the attention, the KV cache, the sampling "
               "and the roofline. Open the address it prints (http://127.0.0.1:7860 by default).")
ENVIRONMENT = f"""{MODEL_ENVIRONMENT}
  GRADIO_SERVER_NAME, GRADIO_SERVER_PORT   the defaults of --host and --port
  {SESSIONS_VARIABLE}, {PER_ADDRESS_VARIABLE}   the defaults of --max-sessions and --max-sessions-per-address
  SPACE_ID             set (as on Hugging Face Spaces): hosted mode"""


def parser() -> argparse.ArgumentParser:
    """The launcher's options (`python app.py`)."""
    parser = argparse.ArgumentParser(description=DESCRIPTION, epilog=ENVIRONMENT, formatter_class=HelpFormatter)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the app's options to `parser` (`python app.py` and `llm-explorer app` share them)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", help="hub id or local folder of a causal LM (default: the embedded SmolLM2)")
    source.add_argument("--config", help="shape-only: a preset name or a config.json path")
    parser.add_argument("--device", default="auto", help="auto (CUDA, then Apple MPS, then CPU), cpu, cuda[:N] or mps")
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                        help="auto: bfloat16 on CUDA (float16 where it lacks bfloat16), float32 on CPU and MPS")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to serve on (default: $GRADIO_SERVER_NAME or 127.0.0.1)")
    parser.add_argument("--port", type=whole(1, 65535), default=os.environ.get("GRADIO_SERVER_PORT", "7860"),
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    parser.add_argument("--share", action="store_true",
                        help="also serve a temporary public link through Gradio's share servers (gradio.live; "
                             "needs the network; not on Hugging Face Spaces)")
    parser.add_argument("--hosted", action="store_true", default=None,
                        help="hosted mode: allow-listed models only, shorter prompts and runs, bounded queue "
                             "(on by itself where $SPACE_ID is set, as on Hugging Face Spaces)")
    parser.add_argument("--max-prompt-tokens", type=whole(1), help="longest prompt the app accepts (default 2048; "
                        "hosted 512)")
    parser.add_argument("--max-sessions", type=whole(1), default=os.environ.get(SESSIONS_VARIABLE),
                        help=f"live sessions the app holds at once, one per open page (default ${SESSIONS_VARIABLE}, "
                             "else 64; hosted 20): raise it for a class (20 sessions of 512 tokens hold under 2 GB)")
    parser.add_argument("--max-sessions-per-address", type=whole(1), default=os.environ.get(PER_ADDRESS_VARIABLE),
                        help=f"live sessions one network address may hold (default ${PER_ADDRESS_VARIABLE}, else no "
                             "cap; hosted 40): a class behind one school network shares one address")


def main(argv: list[str] | None = None) -> None:
    """Parse `argv` (default: the command line), load the model and serve the app until interrupted."""
    serve(parser().parse_args(argv))


def serve(args: argparse.Namespace) -> None:
    """Serve the app and load the model `args` names behind it, until interrupted.

    The page is served first (Gradio and the app's layout need no torch); the model is then loaded in
    a background thread, its progress on stderr, while the page says it is loading and every event
    that runs the model waits for it. A load that fails is printed ("error: ...") and said on the
    page; the app stays up (saved runs, other models).

    Exits with a one-line "error: ..." message when the installed package lacks a file the page
    reads (checked before any model work) or the port is taken.
    """
    from explorer.errors import ExplorerError
    from explorer.ui.static import check_assets

    try:
        check_assets()  # before any model work: a broken install is said as such
    except ExplorerError as exc:
        sys.exit(f"error: {exc}")
    from explorer.ui.hosting import limits_for
    from explorer.ui.layout import build_demo, launch_options
    from explorer.ui.startup import ModelFacts, PendingModel

    limits = limits_for(args.hosted)
    if args.max_prompt_tokens is not None:
        limits = dataclasses.replace(limits, max_prompt_tokens=args.max_prompt_tokens)
    try:
        limits = limits.with_room(args.max_sessions, args.max_sessions_per_address)
    except ExplorerError as exc:
        sys.exit(f"error: {exc}")
    pending = PendingModel(ModelFacts.expected(args.model, args.config), functools.partial(load_start_model, args))
    try:
        demo = build_demo(pending, device=args.device, limits=limits)
        demo.launch(server_name=args.host, server_port=args.port, prevent_thread_lock=True, share=args.share,
                    quiet=True, **launch_options(limits))  # quiet: its hint names `launch()`'s share=True
    except OSError as exc:
        sys.exit(f"error: cannot serve on {args.host}:{args.port} ({exc}). Pick another port with --port.")
    say(served_text(demo.local_url, demo.share_url, args.share), stdout=True)
    pending.start()  # once the server is up: the loading thread's imports would slow its start
    demo.block_thread()


def served_text(local_url: str, share_url: str | None, share: bool) -> str:
    """The lines printed once the app is served: its local address, then its public link, or how to get one.

    Gradio prints the public link itself; it prints nothing else here (`quiet=True`), as its own hint
    would tell the user to edit a `launch()` call this command makes for them.
    """
    lines = [f"* Running on local URL:  {local_url}"]
    if share and share_url is None:
        lines.append("* No public link: Gradio could not reach its share servers (see above); the local URL works.")
    elif not share:
        lines.append("* --share also serves a temporary public link.")
    return "\n".join(lines)


def load_start_model(args: argparse.Namespace) -> LoadedModel:
    """Import the runner, pick the device and load (and warm up) the model of `args`
    (`explorer.runner.loading.load`), its progress on stderr, then a `READY` line; a failure is printed
    as one line ("error: ...", with the traceback if it is not one of the explorer's errors) and raised.
    Where nobody reads the output any more (a closed pipe), it is silenced and the load goes on
    (`explorer.closed_pipe`): the app keeps serving.

    Run in the loading thread only: every runner module the app's handlers import is imported here,
    before any handler may (transformers imports its parts lazily, and two threads importing them
    at once can fail).
    """
    from explorer.errors import ExplorerError

    try:
        import explorer.runner.equivalence
        import explorer.runner.lens
        import explorer.runner.probe
        import explorer.runner.sampling
        import explorer.runner.session  # noqa: F401
        from explorer.runner.devices import pick_device
        from explorer.runner.loading import load

        loaded = again_if_closed(lambda: load(model=args.model, config=args.config, device=pick_device(args.device),
                                              dtype=args.dtype, progress=say))
    except ExplorerError as exc:
        say(f"error: {exc}")
        raise
    except Exception:
        say(traceback.format_exc().rstrip())
        raise
    say(f"{READY} {loaded.description}")
    return loaded
