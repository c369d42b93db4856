"""Load times of the embedded model: the one-off GGUF conversion (cold) and a load from the cache (warm).

Target (the app's start-up budget): warm load < 2 s; the cold conversion shows progress.
Run from the repo root: `HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_load.py [--repeats 5]`
(or without PYTHONPATH after `pip install -e .`). Converts into a temporary
cache directory, so the user cache is neither read nor written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

WARM_TARGET_S = 2.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="warm loads to take the median of")
    args = parser.parse_args()

    started = time.perf_counter()
    from explorer.runner.loading import load_model
    import_s = time.perf_counter() - started

    with tempfile.TemporaryDirectory(prefix="explorer-bench-") as cache:
        os.environ["EXPLORER_CACHE_DIR"] = cache
        started = time.perf_counter()
        load_model(progress=lambda message: print(f"  progress: {message}"))
        cold_s = time.perf_counter() - started
        warm_s = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            load_model()
            warm_s.append(time.perf_counter() - started)

    warm_median_s = statistics.median(warm_s)
    print(f"import explorer.runner.loading (torch, transformers): {import_s:.2f} s")
    print(f"cold: GGUF -> float32 safetensors conversion + load: {cold_s:.1f} s")
    print(f"warm: load from cache, median of {args.repeats}: {warm_median_s:.2f} s "
          f"(min {min(warm_s):.2f}, max {max(warm_s):.2f}); target < {WARM_TARGET_S:.0f} s: "
          f"{'met' if warm_median_s < WARM_TARGET_S else 'MISSED'}")
    print(f"cold / warm: {cold_s / warm_median_s:.0f}x")


if __name__ == "__main__":
    main()
