"""Pipeline parallelism on the embedded model (`llm-explorer lab pipeline`): its 30 layers over
--stages processes (gloo on this CPU, one thread each), a batch of M requests (each a prompt of
--prompt-tokens) sent through as M micro-batches in GPipe's order, for each M of --microbatches; per
run, each stage's compute over the pass (measured, ms), the pass's makespan, and the bubble (the idle
share of the stages × makespan grid, measured) beside GPipe's (S - 1)/(M + S - 1) (computed).

The last stage also runs the final norm and the LM head (d = 576 to V = 49,152), so the stages are not
equal, as the formula assumes; and S one-thread processes get S cores' worth of compute only where the
machine has S free cores, so on a busy CPU the stages slow each other down.

Run: python benchmarks/bench_lab_pipeline.py [--prompt-tokens 32] [--stages 3] [--microbatches 1 2 4 8]
"""

from __future__ import annotations

import argparse
import time

from bench_runner import prompt_of

from explorer.runner.lab.pipeline import run_pipeline
from explorer.runner.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--microbatches", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    loaded = load_model(device="cpu")
    ids = loaded.tokenizer(prompt_of(loaded.tokenizer, args.prompt_tokens), add_special_tokens=False)["input_ids"]
    print(f"embedded model, S = {args.stages} stages, micro-batches of 1 request of {len(ids)} prompt tokens; "
          "ms measured, formula computed")
    stages = "".join(f"{'stage ' + str(s) + ' ms':>12}" for s in range(args.stages))
    print(f"{'M':>3} {'run s':>6}{stages} {'makespan ms':>12} {'bubble':>7} {'formula':>8} {'sends':>6} {'max |Δ|':>8}")
    for microbatches in args.microbatches:
        start = time.perf_counter()
        r = run_pipeline(loaded, ids, stages=args.stages, microbatches=microbatches)
        busy = "".join(f"{run.busy_ms:>12.1f}" for run in r.runs)
        print(f"{microbatches:>3} {time.perf_counter() - start:>6.1f}{busy} {r.makespan_ms:>12.1f} {r.bubble:>7.1%} "
              f"{float(r.formula_bubble):>8.1%} {len(r.sends):>6} {r.max_abs_diff:>8.1g}")


if __name__ == "__main__":
    main()
