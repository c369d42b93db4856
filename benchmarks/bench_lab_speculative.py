"""Self-speculative decoding on the embedded model (prints measured numbers; never asserts a time).

For draft depths k in {6, 12, 18} of the 30 layers and g in {2, 4} guesses a round: the acceptance
rate (measured), the time per token of speculative and of plain greedy decoding after the same
prefill (measured, medians of --repeats runs each), their ratio, and the bytes per token of each
(estimated by the cost model). The tokens of every run are checked against plain greedy decoding's.

Run: python benchmarks/bench_lab_speculative.py [--tokens 32] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse

import torch

from explorer.runner.lab.speculative import run_speculative
from explorer.runner.loading import load_model

PROMPT = "Write a short story about a robot who learns to paint. Once upon a time,"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="tokens decoded each way per run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per way (median kept)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(device="cpu")
    ids = loaded.tokenizer(PROMPT)["input_ids"]
    print(f"model: {loaded.description}; prompt {len(ids)} tokens; {args.tokens} tokens decoded; "
          f"{torch.get_num_threads()} threads; medians of {args.repeats}")
    print(f"{'k':>3} {'g':>2} {'acceptance':>10} {'verify passes':>13} {'ms/token spec':>14} {'ms/token plain':>15} "
          f"{'speed-up':>9} {'MB/token spec':>14} {'MB/token plain':>15} {'tokens equal':>13}")
    for depth in (6, 12, 18):
        for guesses in (2, 4):
            r = run_speculative(loaded, ids, depth=depth, guesses=guesses, tokens=args.tokens, repeats=args.repeats)
            print(f"{depth:>3} {guesses:>2} {r.acceptance_rate:>10.0%} {len(r.rounds):>13} "
                  f"{r.ms_per_token(True):>14.1f} {r.ms_per_token(False):>15.1f} {r.speed_up:>8.2f}x "
                  f"{r.bytes_per_token(True) / 1e6:>14.1f} {r.bytes_per_token(False) / 1e6:>15.1f} "
                  f"{str(r.same_tokens):>13}")
    print("acceptance, passes and times measured; MB per token estimated (cost model, weights read once a pass)")


if __name__ == "__main__":
    main()
