"""KV-cache quantization on the embedded model (issue 34's table; prints measurements, never asserts).

`explorer lab kvquant`: the float32 KV cache, INT8 and FP8 (e4m3) caches with one fp16 scale per token
per KV head, each run on the shipped text (`--text-tokens` of the Gettysburg Address): perplexity and
mean KL from the float cache's next-token distribution (measured), the cache's bytes per token
(computed), and the wall time of one decode step (median of the runner's timed steps) with its ratio to
float32's. The quantized caches dequantize every position each step in Python, so their steps are
slower here; the roofline's predicted bound at batch 64 (estimated, on the GPU named) says what reading
one-byte codes would gain.

Run: python benchmarks/bench_lab_kvquant.py [--prompt "..."] [--text-tokens 256] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from explorer.lab.kvquant import BOUND_BATCH
from explorer.runner.lab.kvquant import run_kvquant
from explorer.runner.loading import load_model
from explorer.runner.session import InferenceSession


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--text-tokens", type=int, default=256)
    parser.add_argument("--continue-tokens", type=int, default=12)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(device="cpu")
    ids = InferenceSession(loaded).prompt_ids(args.prompt, False)
    start = time.perf_counter()
    result = run_kvquant(loaded, ids, kv_format=0, continue_tokens=args.continue_tokens, text_tokens=args.text_tokens)
    print(f"{loaded.description}; {torch.get_num_threads()} threads; run took {time.perf_counter() - start:.1f} s")
    print(f"shipped text: {result.text_tokens} tokens; predicted bounds on the {result.hardware}, batch "
          f"{BOUND_BATCH}, {result.bound_context} positions a sequence")
    print(f"{'variant':<10} {'B/token':>8} {'perplexity':>10} {'mean KL':>9} {'top-1':>6} {'diverges':>8} "
          f"{'step ms':>8} {'x float32':>9} {'bound µs':>9} {'x float32':>9}")
    base = result.variants[0]
    for v in result.variants:
        diverges = "never" if v.diverges_at is None else f"at {v.diverges_at}"
        print(f"{v.name:<10} {v.bytes_per_element:>8.0f} {v.fidelity.text_perplexity:>10.3f} "
              f"{v.fidelity.text_kl_mean:>9.2e} {v.fidelity.text_top1:>6.1%} {diverges:>8} {v.step_ms:>8.1f} "
              f"{v.step_ms / base.step_ms:>9.2f} {v.predicted_step_s * 1e6:>9.1f} "
              f"{v.predicted_step_s / base.predicted_step_s:>9.2f}")
    print("(perplexity, KL, top-1, diverges, step ms: measured; B/token: computed; bound: estimated by the roofline)")


if __name__ == "__main__":
    main()
