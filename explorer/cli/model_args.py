"""What the commands that run a loaded model share: its prompt options, and its loading."""

from __future__ import annotations

import argparse
import sys

from explorer.analysis.precision import DTYPE_CHOICES
from explorer.errors import UsageError


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The prompt and the model's options: PROMPT, --model, --chat-template, --device, --dtype."""
    parser.add_argument("prompt", help="the prompt (raw text; --chat-template to wrap it)")
    parser.add_argument("--model", help="hub id or local folder of a causal LM (default: the embedded SmolLM2)")
    parser.add_argument("--chat-template", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--device", default="auto", help="auto (CUDA, then Apple MPS, then CPU), cpu, cuda, cuda:1, mps")
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                        help="weights' dtype; auto: bfloat16 on CUDA, float32 on CPU and MPS")


def load_for(args: argparse.Namespace):
    """The `LoadedModel` that `args` name, its progress on stderr.

    Raises:
        UsageError: an empty prompt (checked before the model loads).
        ExplorerError: the model cannot be loaded.
    """
    if not args.prompt.strip():
        raise UsageError("The prompt is empty: give some text.")
    from explorer.runner.loading import load

    return load(model=args.model, device=args.device, dtype=args.dtype,
                progress=lambda message: print(message, file=sys.stderr))
