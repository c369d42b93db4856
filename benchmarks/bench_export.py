"""Exports and the converted-model check, measured on the embedded model: an export's size against
its estimate, the time to write it with attention (as locally) and without (a hosted app over its
cap), the time of the estimate itself, and the time `embedded.damage` takes to hash the cache.

    python benchmarks/bench_export.py [--prompt-tokens 512] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from dataclasses import replace

import numpy as np

from explorer.config import SamplingSettings
from explorer.runner import embedded
from explorer.runner.loading import load_model
from explorer.runner.session import InferenceSession
from explorer.ui.export import estimated_bytes, plan_export, size_text, write_export
from explorer.ui.hosting import HOSTED, LOCAL
from explorer.ui.views import Visit


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    loaded = load_model(device="cpu")
    folder = embedded.converted_dir()
    problem, hash_s = timed(embedded.damage, folder)
    weights_bytes = (folder / "model.safetensors").stat().st_size
    print(f"cache check (sizes + SHA-256 of every file, {size_text(weights_bytes)} of weights): {hash_s:.2f} s, "
          f"{problem or 'no damage'}")

    session = InferenceSession(loaded, SamplingSettings(do_sample=True, temperature=0.8, top_k=50, top_p=0.9),
                               max_prompt_tokens=4096)
    ids = np.random.default_rng(0).integers(100, 40_000, args.prompt_tokens).tolist()
    session.prefill(loaded.tokenizer.decode(ids), use_chat_template=False)
    for _ in range(args.steps):
        session.decode_step()
    print(f"run: a {len(session.traces[0].input_ids)}-token prefill and {args.steps} decode steps")
    pieces = session.run.pieces
    print(f"pieces: {len(pieces)} named, {len(json.dumps(pieces)) / len(pieces):.1f} bytes each in the file")
    with tempfile.TemporaryDirectory() as cache:
        for name, limits in (("local", LOCAL), ("hosted", replace(HOSTED, max_new_tokens=LOCAL.max_new_tokens))):
            visit = Visit.start(session, limits)
            plan, plan_s = timed(plan_export, visit)
            path, write_s = timed(write_export, visit, plan, cache)
            size_bytes = path.stat().st_size
            print(f"{name:6s}: {size_text(size_bytes)} written in {write_s:.1f} s; estimated "
                  f"{size_text(plan.estimated_bytes)} in {plan_s * 1e3:.0f} ms (estimate / size = "
                  f"{plan.estimated_bytes / size_bytes:.3f}); attention "
                  f"{'left out' if plan.attention_left_out else 'kept'}")
            visit.exports.clear()  # the next visit shares the session: keep its export apart
        _, bare_s = timed(estimated_bytes, visit, False)
        print(f"estimate without attention alone: {bare_s * 1e3:.0f} ms")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
