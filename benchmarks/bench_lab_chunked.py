"""Chunked prefill's time per token on the embedded model: the prompt prefilled in chunks of C = 1, 16,
64 and all of it (the lab's `chunked` experiment), each against one prefill of the whole prompt in the
same run. Per C: the chunks' summed wall time (each chunk's median over --repeats runs), per token,
and as a ratio to one prefill; the weight GEMMs' arithmetic intensity of a full chunk (estimated, bf16);
max |Δlogit| against one prefill.

Run: python benchmarks/bench_lab_chunked.py [--prompt-tokens 128] [--chunks 1 16 64 0] [--repeats 3]
"""

from __future__ import annotations

import argparse

from bench_runner import prompt_of

from explorer.runner.lab.chunked import run_chunked
from explorer.runner.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-tokens", type=int, default=128, help="a plain-text prompt of this many tokens")
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 16, 64, 0], help="chunk sizes C (0: all)")
    parser.add_argument("--repeats", type=int, default=3, help="chunked prefills timed per C (medians kept)")
    args = parser.parse_args()
    loaded = load_model(device="cpu")
    ids = loaded.tokenizer(prompt_of(loaded.tokenizer, args.prompt_tokens), add_special_tokens=False)["input_ids"]
    print(f"{loaded.description}, {loaded.device}; a {len(ids)}-token prompt, medians of {args.repeats} runs")
    print(f"{'C':>5} {'chunks':>6} {'chunked ms':>11} {'ms/token':>9} {'one prefill ms/token':>21} {'ratio':>6} "
          f"{'GEMM FLOP/byte':>15} {'max |Δ|':>8}")
    for size in args.chunks:
        r = run_chunked(loaded, ids, chunk=size, repeats=args.repeats)
        per_token, full_per_token = r.chunked_ms / r.prompt_tokens, r.full_ms / r.prompt_tokens
        print(f"{size or 'all':>5} {len(r.chunks):>6} {r.chunked_ms:>11.1f} {per_token:>9.2f} {full_per_token:>21.2f} "
              f"{per_token / full_per_token:>5.1f}x {r.chunks[0].cost.gemm_intensity:>15.1f} {r.max_abs_diff:>8.1g}")
    print(f"ridge point of the {r.ridge_hardware}: {r.ridge_flops_per_byte:.0f} FLOP/byte (bf16, computed)")


if __name__ == "__main__":
    main()
