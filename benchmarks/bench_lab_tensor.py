"""Tensor parallelism on the embedded model (`llm-explorer lab tensor`): the model sharded over R = 1
and R = 3 processes (gloo on this CPU, one thread each), a prompt of --prompt-tokens, then --tokens
greedy tokens; per rank group, the prefill and the median decode step (the slowest rank's), the time
in collectives and its share, and the all-reduces' bytes a step (measured; the formula beside).

Beside them, "predicted share on NVLink 4": the collectives' share of a decode step of the same model
at the same R on H100 SXMs joined by NVLink 4 (computed: one rank's operators on the H100's roofline,
bf16, then the 2L + 1 all-reduces and the logits' all-gather on the link;
`explorer.analysis.tensor_parallel`), what the measured share here would be on that machine.

R = 1 runs the same sharded code on one rank (its all-reduces are over one process): the baseline
for what splitting the weights saves in compute and costs in communication. Each process has one
thread, so R = 3 has three cores' worth of compute only where the machine has three free cores.

Run: python benchmarks/bench_lab_tensor.py [--prompt-tokens 64] [--tokens 16] [--ranks 1 3]
"""

from __future__ import annotations

import argparse
import time

from bench_runner import prompt_of

from explorer.analysis.hardware import get_hardware, get_link
from explorer.analysis.records import Step
from explorer.analysis.spec import ModelSpec
from explorer.analysis.tensor_parallel import tensor_parallel_step
from explorer.figures.theme import si_text
from explorer.runner.lab.tensor import run_tensor
from explorer.runner.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 3])
    args = parser.parse_args()
    loaded = load_model(device="cpu")
    ids = loaded.tokenizer(prompt_of(loaded.tokenizer, args.prompt_tokens), add_special_tokens=False)["input_ids"]
    print(f"embedded model, {len(ids)} prompt tokens, up to {args.tokens} greedy tokens; measured, slowest rank")
    print(f"{'R':>3} {'run s':>7} {'prefill ms':>11} {'in comm':>8} {'decode ms':>10} {'in comm':>8} "
          f"{'share':>6} {'bytes/decode step':>18} {'formula':>10} {'max |Δ|':>8} {'tokens':>7} "
          f"{'predicted share on NVLink 4':>28}")
    spec = ModelSpec.from_hf_config(loaded.model.config.to_dict())
    for ranks in args.ranks:
        start = time.perf_counter()
        r = run_tensor(loaded, ids, ranks=ranks, tokens=args.tokens)
        prefill, prefill_comm = r.prefill_ms()
        step, step_comm = r.decode_ms()
        print(f"{ranks:>3} {time.perf_counter() - start:>7.1f} {prefill:>11.1f} {prefill_comm:>8.1f} {step:>10.1f} "
              f"{step_comm:>8.1f} {step_comm / step:>6.0%} {si_text(r.measured_bytes(1), 'B'):>18} "
              f"{si_text(r.formula_bytes(1), 'B'):>10} {r.max_abs_diff:>8.1g} "
              f"{'same' if r.same_tokens else 'DIFFER':>7} {predicted_share(spec, len(ids) + 1, ranks):>28.1%}")


def predicted_share(spec: ModelSpec, context: int, ranks: int) -> float:
    """The collectives' share of a decode step at `context` over `ranks` H100 SXMs on NVLink 4 (computed)."""
    return tensor_parallel_step(spec, Step.decode(context), get_hardware("h100-sxm"), get_link("nvlink4"),
                                ranks).communication_share


if __name__ == "__main__":
    main()
