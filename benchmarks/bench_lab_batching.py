"""Continuous batching's benchmark on the embedded model (prints measured figures; never asserts a time).

4 requests cut from one prompt (request i: its first T(i+1)/4 tokens, min(new_tokens, 2 + 3i) new
tokens, admitted at step i), run continuously batched (one packed forward pass per engine step) and
one after another (each alone on its own KV cache); generated tokens per second of each, medians of
--repeats runs, and their ratio. Also the packed against padded tokens fed and the KV cache's bytes in
pages against a padded cache at the peak step (computed).

Run: python benchmarks/bench_lab_batching.py [--requests 4] [--new-tokens 16] [--prompt-tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse

import torch

from explorer.runner.lab.batching import run_batching
from explorer.runner.loading import load_model

TEXT = "The quick brown fox jumps over the lazy dog while the river runs to the sea. "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=64, help="T: the longest request's prompt")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(device="cpu")
    ids = loaded.tokenizer(TEXT * (args.prompt_tokens // 8 + 1), add_special_tokens=False)["input_ids"][:args.prompt_tokens]
    r = run_batching(loaded, ids, args.requests, args.block_size, args.new_tokens, repeats=args.repeats)
    print(f"{loaded.description}; {torch.get_num_threads()} threads")
    print(f"{len(r.requests)} requests: prompts {[q.prompt_tokens for q in r.requests]} tokens, new "
          f"{[q.new_tokens for q in r.requests]} tokens, {len(r.layouts)} engine steps")
    print(f"continuous batching : {r.batched_ms:8.0f} ms  {r.tokens_per_s(True):6.1f} tokens/s (measured, median of {r.repeats})")
    print(f"one after another   : {r.alone_ms:8.0f} ms  {r.tokens_per_s(False):6.1f} tokens/s")
    print(f"speed-up            : {r.alone_ms / r.batched_ms:.2f}x")
    print(f"greedy tokens identical: {r.same_tokens}; logits max |Δ| {r.max_abs_diff:.2g} "
          f"(largest |logit| {r.max_abs_logit:.3g})")
    packed, padded = sum(x.num_tokens for x in r.layouts), sum(x.padded_tokens for x in r.layouts)
    print(f"tokens fed (computed): packed {packed}, padded {padded} ({padded - packed} padding, "
          f"{(padded - packed) / padded:.0%})")
    peak = r.memory[r.peak_step]
    print(f"KV cache at step {r.peak_step} (computed): used {peak.used_positions * r.bytes_per_position / 1e6:.2f} MB, "
          f"pages of {r.block_size} {peak.paged_positions * r.bytes_per_position / 1e6:.2f} MB, padded "
          f"{peak.padded_positions * r.bytes_per_position / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
