"""The lossy lab experiments on the embedded model (issue 34's table; prints measurements, never asserts).

Weight quantization (`explorer lab quant`): float32, INT8 per output channel and INT4 per group of
`--group-size`, each run on the shipped text (`--text-tokens` of the Gettysburg Address): perplexity and
mean KL from float32's next-token distribution (measured), and the wall time of one decode step (median
of the runner's timed steps) with its ratio to float32's. The INT variants are fake-quantized (dequantized
to float32 before each matmul), so their step times are float32 matmuls: a ratio near 1 is expected
here, and the roofline's predicted bound (estimated, on the GPU named) says what an INT kernel would gain.

Run: python benchmarks/bench_lab_lossy.py [--prompt "..."] [--group-size 32] [--text-tokens 256] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from explorer.runner.lab.quant import run_quant
from explorer.runner.loading import load_model
from explorer.runner.session import InferenceSession


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--text-tokens", type=int, default=256)
    parser.add_argument("--continue-tokens", type=int, default=12)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(device="cpu")
    ids = InferenceSession(loaded).prompt_ids(args.prompt, False)
    start = time.perf_counter()
    result = run_quant(loaded, ids, bits=0, group_size=args.group_size, continue_tokens=args.continue_tokens,
                       text_tokens=args.text_tokens)
    print(f"{loaded.description}; {torch.get_num_threads()} threads; run took {time.perf_counter() - start:.1f} s")
    print(f"shipped text: {result.text_tokens} tokens; predicted bounds on the {result.hardware}, batch 1")
    print(f"{'variant':<17} {'B/weight':>8} {'perplexity':>10} {'mean KL':>9} {'top-1':>6} {'step ms':>8} "
          f"{'x float32':>9} {'bound µs':>9} {'x float32':>9}")
    base = result.variants[0]
    for v in result.variants:
        print(f"{v.name:<17} {v.bytes_per_element:>8.3f} {v.fidelity.text_perplexity:>10.2f} "
              f"{v.fidelity.text_kl_mean:>9.2e} {v.fidelity.text_top1:>6.1%} {v.step_ms:>8.1f} "
              f"{v.step_ms / base.step_ms:>9.2f} {v.predicted_step_s * 1e6:>9.1f} "
              f"{v.predicted_step_s / base.predicted_step_s:>9.2f}")
    print("(perplexity, KL, top-1, step ms: measured; B/weight: computed; bound: estimated by the roofline)")


if __name__ == "__main__":
    main()
