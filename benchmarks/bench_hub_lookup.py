"""How long an unknown hub id takes to be refused where the hub cannot be reached (prints; never asserts
a time): the explorer's look-up (`explorer.runner.loading.resolved_model_config`: the cache, then one
`model_info` with a timeout) against transformers' own `AutoConfig.from_pretrained`, which retries a
lost connection. Run it on a machine without network, or with the network cut; the imports are done
before any timing. Target: the explorer's answer in under 5 s.

Run: python benchmarks/bench_hub_lookup.py [--repeats 3] [--transformers]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["HF_HUB_OFFLINE"] = "0"  # the case measured: a hub that is not switched off, and out of reach


def seconds_to_refuse(call, name: str) -> tuple[float, str]:
    """Wall seconds `call(name)` takes to raise, and the first 100 characters of its message."""
    start = time.perf_counter()
    try:
        call(name)
    except Exception as exc:  # noqa: BLE001 - the refusal is what is measured
        return time.perf_counter() - start, str(exc)[:100]
    raise SystemExit(f"{name} was found: this machine reaches the hub, so the measure means nothing here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--transformers", action="store_true",
                        help="also time transformers' AutoConfig.from_pretrained (about 30 s a try)")
    args = parser.parse_args()
    from transformers import AutoConfig

    from explorer.runner.loading import resolved_model_config

    calls = {"explorer (cache, then one model_info)": lambda name: resolved_model_config(model=name)}
    if args.transformers:
        calls["transformers AutoConfig.from_pretrained"] = AutoConfig.from_pretrained
    for label, call in calls.items():
        runs = [seconds_to_refuse(call, f"explorer-bench/no-such-model-{i}") for i in range(args.repeats)]
        times = [seconds for seconds, _ in runs]
        print(f"{label:<42} median {statistics.median(times):6.2f} s  (min {min(times):.2f}, max {max(times):.2f}, "
              f"{args.repeats} runs)  {runs[0][1]!r}")


if __name__ == "__main__":
    main()
