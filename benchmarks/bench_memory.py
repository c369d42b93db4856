"""The memory estimate of a prompt against the measured peak, on the embedded model (prints; never asserts).

For each prompt length (default 512, 2,048 and 8,191 tokens, no chat template) a fresh process loads the
model, runs a short warm-up prefill, then the prompt's prefill and one decode step (where the context has room), while a thread reads
the process's resident memory (/proc/self/statm) every 2 ms. Printed: the estimate of what the prompt
adds to the loaded model (`InferenceSession.memory_estimate(T).run_bytes`: KV cache, kept queries and
matrices, one layer's attention mask, block and activations) beside the measured peak RSS minus the
RSS before the prefill, and their ratio (the issue's aim: within 25%).

Run: python benchmarks/bench_memory.py [--tokens 512 2048 8191]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """This process's resident memory now."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE_BYTES


class PeakSampler(threading.Thread):
    """Reads `rss_bytes` every 2 ms until stopped; `peak` is the largest reading."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.running = rss_bytes(), True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.002)


def measure(n_tokens: int) -> None:
    """In this process: print the estimate and the measured peak of a prefill of `n_tokens` and one step."""
    import torch
    from bench_runner import prompt_of

    from explorer.config import SamplingSettings
    from explorer.runner.loading import load
    from explorer.runner.session import InferenceSession

    torch.set_grad_enabled(False)
    loaded = load(device="cpu")  # as the app and the CLI start: then `settle` (and its heap policy)
    prompt = prompt_of(loaded.tokenizer, n_tokens)
    warm = InferenceSession(loaded, SamplingSettings(max_new_tokens=2))
    warm.prefill(prompt[:200], use_chat_template=False)
    warm.close()
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=4))
    estimate = session.memory_estimate(n_tokens)
    before = rss_bytes()
    sampler = PeakSampler()
    sampler.start()
    start = time.perf_counter()
    session.prefill(prompt, use_chat_template=False)
    prefill_s = time.perf_counter() - start
    if not session.finished:  # a prompt of 8,191 tokens fills the 8,192-token context
        session.decode_step()
    sampler.running = False
    sampler.join()
    measured = sampler.peak - before
    print(f"{n_tokens:>6,} tokens: estimated {estimate.run_bytes / 1e6:7,.0f} MB, measured peak "
          f"{measured / 1e6:7,.0f} MB over the loaded model (RSS {before / 1e6:,.0f} -> {sampler.peak / 1e6:,.0f} MB), "
          f"estimate / measured {estimate.run_bytes / measured:.2f}; prefill {prefill_s:.1f} s; "
          f"weights estimated {estimate.weight_bytes / 1e6:,.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048, 8191])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process's prompt length
    args = parser.parse_args()
    if args.one is not None:
        measure(args.one)
        return
    print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores)")
    for n_tokens in args.tokens:
        subprocess.run([sys.executable, __file__, "--one", str(n_tokens)], check=True)


if __name__ == "__main__":
    main()
