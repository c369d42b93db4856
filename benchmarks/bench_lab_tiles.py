"""FlashAttention's tiles on the embedded model: the lab's run (`llm-explorer lab tiles`) on a prompt of
--prompt-tokens, then the online softmax's row against the direct row in numpy for n = 512, 2048 and
8192 keys and B_c = 16, 64 and 256, on random float32 rows of the model's head_dim.

The numpy rows say what the block loop costs in Python on this CPU, not what a kernel costs: a GPU
kernel's gain is the HBM traffic of the score matrix it never writes, which numpy cannot show.

Run: python benchmarks/bench_lab_tiles.py [--prompt-tokens 512] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from bench_runner import prompt_of

from explorer.lab.tiles import direct_attention, online_softmax
from explorer.runner.lab.tiles import run_tiles
from explorer.runner.loading import load_model

KEYS = (512, 2048, 8192)
BLOCKS = (16, 64, 256)


def median_ms(repeats: int, run, *arguments) -> float:
    """The median wall time of `repeats` calls of run(*arguments), in ms."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(*arguments)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    loaded = load_model(device="cpu")
    ids = loaded.tokenizer(prompt_of(loaded.tokenizer, args.prompt_tokens), add_special_tokens=False)["input_ids"]
    start = time.perf_counter()
    result = run_tiles(loaded, ids, block=16)
    print(f"lab run, {len(ids)} tokens, layer 0, B_c 16: {(time.perf_counter() - start) * 1e3:.0f} ms; "
          f"max |Δo| {result.max_abs_diff:.2g}; scores {result.scores_bytes / 1e6:.2f} MB against tiles "
          f"{result.tile_bytes / 1e3:.1f} kB ({result.scores_bytes / result.tile_bytes:.0f}x)")
    head_dim = loaded.model.config.head_dim
    rng = np.random.default_rng(0)
    print(f"one row in numpy, float32, d_h {head_dim}: medians of {args.repeats}")
    print(f"{'n':>6} {'direct ms':>10} " + " ".join(f"{f'B_c {block} ms':>12} {'ratio':>6}" for block in BLOCKS))
    for keys in KEYS:
        query, k, v = (rng.standard_normal(shape).astype(np.float32)
                       for shape in ((head_dim,), (keys, head_dim), (keys, head_dim)))
        direct = median_ms(args.repeats, direct_attention, query, k, v, head_dim ** -0.5)
        cells = []
        for block in BLOCKS:
            online = median_ms(args.repeats, online_softmax, query, k, v, head_dim ** -0.5, block)
            cells.append(f"{online:>12.3f} {online / direct:>5.1f}x")
        print(f"{keys:>6} {direct:>10.3f} " + " ".join(cells))


if __name__ == "__main__":
    main()
