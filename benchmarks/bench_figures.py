"""Figure build benchmarks on hand-built SmolLM2-sized traces (prints times and sizes; never asserts).

SmolLM2-135M's dimensions (30 layers, 9 query heads / 3 KV heads, head_dim 64, d 576, vocab 49,152,
d_ff 1,536), a 35-token prompt and 5 decode steps (a 40-token context), the views as the app draws
them after decode step 5: journey of layer 3, attention of layer 3 (9 heads), the KV cache over the
6 steps, sampling (greedy, the app's default, and temperature 0.7 -> top-k 50 -> top-p 0.9 -> min-p
0.05), roofline on this machine with measured points, redrawn for the same step ("roofline", its
costs memoised after the first build) and for a new decode step each time ("roofline_new_step",
as after Next token: only the prefill's costs are memoised). Per figure: the median time to build the
`go.Figure`, the median time of `fig.to_json()`, and the JSON size. Budget: journey <= 80 ms, every
other figure <= 60 ms to build on the 2-core development machine.

Run: python benchmarks/bench_figures.py [--repeats 15] [--only journey] [--profile journey]
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from figure_traces import SMOLLM2, run_traces, sampling_record, step_attention  # noqa: E402

from explorer.analysis.hardware import Hardware  # noqa: E402
from explorer.analysis.measured import StepCosts, trace_costs  # noqa: E402
from explorer.figures.attention import attention_figure, stack_attention  # noqa: E402
from explorer.figures.journey import journey_figure  # noqa: E402
from explorer.figures.kv_cache import kv_cache_figure  # noqa: E402
from explorer.figures.roofline import roofline_figure  # noqa: E402
from explorer.figures.sampling import sampling_figure  # noqa: E402
from explorer.runner.probe import resolve_hardware  # noqa: E402
from explorer.trace import StepTrace  # noqa: E402

PROMPT = [f" w{i}" for i in range(35)]
DECODE_STEPS = 5
NEW_DECODE_STEPS = 64  # roofline_new_step: a decode step whose costs no earlier build computed
LAYER = 3


def builders() -> dict[str, Callable[[], go.Figure]]:
    """Figure name -> a function building it from the same traces each time."""
    traces = run_traces(SMOLLM2, PROMPT, DECODE_STEPS)
    last = traces[-1]
    pieces = [p for t in traces for p in t.input_pieces]
    blocks = [step_attention(SMOLLM2, t)[LAYER] for t in traces]
    logits = np.random.default_rng(1).normal(scale=3.0, size=SMOLLM2.vocab_size).astype(np.float32)
    greedy = sampling_record(logits)
    sampled = sampling_record(logits, temperature=0.7, top_k=50, top_p=0.9, min_p=0.05)
    hardware = resolve_hardware("this-machine")
    costs = [trace_costs(SMOLLM2, traces[0]), trace_costs(SMOLLM2, last)]  # as the Run keeps them, once per step
    new_steps = itertools.cycle(run_traces(SMOLLM2, PROMPT, NEW_DECODE_STEPS)[1:])
    return {
        "journey": lambda: journey_figure(traces[0], last, LAYER),
        "attention": lambda: attention_figure(stack_attention(blocks), pieces, SMOLLM2.n_kv_heads, LAYER,
                                              last.step_index, new_rows=1),
        "kv_cache": lambda: kv_cache_figure(traces, SMOLLM2.n_heads, last.step_index),
        "sampling_greedy": lambda: sampling_figure(greedy, lambda i: f" w{i}", last.step_index),
        "sampling_filtered": lambda: sampling_figure(sampled, lambda i: f" w{i}", last.step_index),
        "roofline": lambda: roofline_figure(costs, hardware, last.step_index, measured=True),
        "roofline_new_step": lambda: _roofline_of(next(new_steps), costs[0], hardware),
    }


def _roofline_of(decode: StepTrace, prefill: StepCosts, hardware: Hardware) -> go.Figure:
    """A decode step's first roofline: its costs computed (`trace_costs`, as `Run.costs` does once), then drawn."""
    return roofline_figure([prefill, trace_costs(SMOLLM2, decode)], hardware, decode.step_index, measured=True)


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: imports, plotly's validator caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--only", help="one figure name")
    parser.add_argument("--profile", help="one figure name: print its cProfile (cumulative) instead")
    args = parser.parse_args()
    figures = builders()
    if args.profile:
        build = figures[args.profile]
        build()
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [build() for _ in range(5)])
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
        return
    print(f"{'figure':<18} {'build ms':>9} {'to_json ms':>11} {'JSON bytes':>11} {'traces':>7}")
    for name, build in figures.items():
        if args.only and name != args.only:
            continue
        fig = build()
        build_ms = median_ms(build, args.repeats)
        json_ms = median_ms(fig.to_json, args.repeats)
        print(f"{name:<18} {build_ms:9.1f} {json_ms:11.1f} {len(fig.to_json()):11,} {len(fig.data):7}")


if __name__ == "__main__":
    main()
