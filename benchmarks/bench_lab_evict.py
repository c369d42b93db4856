"""KV eviction on the embedded model, over the shipped text and over a long prompt (prints
measurements, never asserts).

`explorer lab evict`: a text (`--text-tokens` of the shipped Gettysburg Address, then of a long prompt:
the project's docs/concepts.md, technical prose the model has not seen here) decoded one token at a
time with the full cache and with a cache of at most `--window` positions under each rule (the most
recent; the first `--sinks` and the most recent; H2O's heavy hitters and the most recent): perplexity
and top-1 agreement with the full cache over the whole text and past W (measured), the wall time per
decoded token (measured, the eager attention of "h2o" included), the cache's bytes (computed), and
how much attention the first tokens draw with the full cache (measured).

Run: python benchmarks/bench_lab_evict.py [--window 64] [--sinks 4] [--text-tokens 192] [--threads N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from explorer.runner.lab.evict import run_evict
from explorer.runner.loading import load_model

LONG_PROMPT = Path(__file__).resolve().parents[1] / "docs" / "concepts.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--text-tokens", type=int, default=192)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(device="cpu")
    long_prompt = loaded.tokenizer(LONG_PROMPT.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    print(f"{loaded.description}; {torch.get_num_threads()} threads")
    for prompt in ([0], long_prompt[:args.text_tokens]):
        table(loaded, prompt, args)


def table(loaded, prompt: list[int], args: argparse.Namespace) -> None:
    """One run of the experiment over `prompt` (the shipped text where it is short), printed."""
    start = time.perf_counter()
    result = run_evict(loaded, prompt, window=args.window, sinks=args.sinks, text_tokens=args.text_tokens)
    seconds = time.perf_counter() - start
    w = result.window
    print(f"\n{result.source}: {result.text_tokens} tokens; W = {w}, S = {result.sinks}, H = {result.heavy}; run "
          f"took {seconds:.1f} s ({seconds * 1e3 / (3 * result.text_tokens):.1f} ms a decoded token, the three "
          "rules together)")
    print(f"{'cache':<11} {'ppl':>8} {'ppl >= W':>9} {'x full':>7} {'top-1':>6} {'top-1 >= W':>10} {'bytes':>10}")
    full = result.runs[0]
    for run in result.runs:
        print(f"{run.name:<11} {run.perplexity():>8.2f} {run.perplexity(w):>9.2f} "
              f"{run.perplexity(w) / full.perplexity(w):>7.2f} {run.top1():>6.1%} {run.top1(w):>10.1%} "
              f"{run.cache_bytes:>10,}")
    print("(perplexity, top-1: measured; bytes: computed as held positions x 2·L·h_kv·d_h·bytes)")
    print(result.sink_line())


if __name__ == "__main__":
    main()
