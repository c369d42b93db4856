"""Where a Next-token click's server time goes, in process on the embedded model: the session's decode
step, the step's outputs with one view drawn, and the export button's size estimate that follows it.

Medians over --steps decode steps of one sampled session (temperature 1.5, so it does not end early).
No browser: compare with benchmarks/bench_app_browser.py for what a person waits.

Run: python benchmarks/bench_step_parts.py [--steps 40] [--view kv_cache] [--prompt-tokens N]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from bench_runner import prompt_of

from explorer.figures.views import VIEWS
from explorer.runner.loading import load_model
from explorer.ui import handlers
from explorer.ui.hosting import LOCAL, Served
from explorer.ui.models import ModelRegistry

SAMPLING = {"do_sample": True, "temperature": 1.5, "seed": 7, "max_new_tokens": 200}
PROMPT = "Write a long story about a dragon who learns to code."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--view", choices=VIEWS, default="kv_cache")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="a plain-text prompt of this many tokens")
    args = parser.parse_args()
    loaded = load_model(device="cpu")
    prompt = PROMPT if args.prompt_tokens is None else prompt_of(loaded.tokenizer, args.prompt_tokens)
    limit = max(LOCAL.max_prompt_tokens, (args.prompt_tokens or 0) + 64)  # room for the chat template
    served = Served.create(ModelRegistry(loaded), dataclasses.replace(LOCAL, max_prompt_tokens=limit))
    view = {"layer": 0, "average_heads": False, "hardware": "this-machine", "shown": args.view}
    visit = handlers.ServedHandlers(served).on_prefill_click(
        None, None, model=served.registry.default_choice, prompt=prompt, use_chat_template=args.prompt_tokens is None,
        **SAMPLING, **view)[0]
    parts: dict[str, list[float]] = {"decode step": [], f"step outputs ({args.view} drawn)": [], "export label": []}
    for _ in range(args.steps):
        start = time.perf_counter()
        visit.session.decode_step()
        stepped = time.perf_counter()
        handlers.step_outputs(visit, handlers.ViewControls(**view))
        drawn = time.perf_counter()
        handlers.on_export_label(visit)
        for name, seconds in zip(parts, (stepped - start, drawn - stepped, time.perf_counter() - drawn), strict=True):
            parts[name].append(seconds)
    print(f"{args.steps} decode steps, medians: "
          + ", ".join(f"{name} {statistics.median(values) * 1e3:.1f} ms" for name, values in parts.items()))


if __name__ == "__main__":
    main()
