"""The CPU's measured roofs against what the embedded model's own decode steps reach (prints;
never asserts a rate).

The probe (`explorer.runner.probe.measure("cpu")`) measures the memory bandwidth past the caches, the
bandwidth of a weight that stays in them, the FLOP/s of a float32 matmul and the time of a
near-empty operator. Then `--steps` hooked decode steps of the embedded model: each weight GEMM's
bytes (cost model) over its measured wall time. A small model's GEMMs (SmolLM2: 0.4-3.5 MB per
matrix) read from the caches, so their best rate sits above the memory slope and should stay
under the cache slope; the per-operator times should sit well above the near-empty operator's.

Run: python benchmarks/bench_probe.py [--steps 6]
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from explorer.analysis.measured import measured_points
from explorer.config import SamplingSettings
from explorer.runner.loading import load_model
from explorer.runner.probe import measure
from explorer.runner.session import InferenceSession


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6, help="decode steps timed")
    args = parser.parse_args()
    entry = measure()
    memory, cache = entry["memory_bandwidth_bytes_per_s"][0], entry["cache_bandwidth_bytes_per_s"][0]
    overhead, flops = entry["op_overhead_s"][0], entry["dense_flops_per_s"]["fp32"][0]
    session = InferenceSession(load_model(device="cpu"), SamplingSettings(max_new_tokens=args.steps + 1))
    session.prefill("What is the capital of France?")
    for _ in range(args.steps):
        session.decode_step()
    gemms = [p for step in session.run.steps[1:] for p in measured_points(step, session.run.spec)
             if p.cost.kind == "gemm"]
    rates = [p.achieved_bytes_per_s for p in gemms]
    walls = [p.wall_ms / 1e3 for p in gemms]
    print(f"probe: memory {memory / 1e9:.1f} GB/s, cache {cache / 1e9:.1f} GB/s, fp32 {flops / 1e9:.0f} GFLOP/s, "
          f"near-empty operator {overhead * 1e6:.1f} µs")
    print(f"decode GEMMs ({len(gemms)} timed): best {max(rates) / 1e9:.1f} GB/s, median "
          f"{statistics.median(rates) / 1e9:.1f} GB/s; median wall {statistics.median(walls) * 1e6:.0f} µs")
    print(f"best GEMM / memory slope {max(rates) / memory:.2f}x, / cache slope {max(rates) / cache:.2f}x; "
          f"median GEMM wall / near-empty operator {statistics.median(walls) / overhead:.1f}x")


if __name__ == "__main__":
    main()
