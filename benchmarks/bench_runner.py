"""Runner benchmarks on the embedded model (prints measured ratios; never asserts a time).

1. Hooked decode step (InferenceSession.decode_step: hooks, eager attention with probabilities,
   sampling, trace) against a plain `model(...)` decode step (default SDPA, no hooks) on a cache of
   the same length, fed the same tokens; median of --steps steps after warm-up. Target <= 1.2x.
   Beside it, in the same loop, a second session that asks for each step's logit lens at once (what
   every step cost while the lens was computed inside the step).
2. Hooked prefill of a 512-token prompt. Target <= 4 s on the 2-core development machine.
3. Memory a session holds after a 2,048-token prompt and 64 decode steps. Target <= 300 MB.

Run: python benchmarks/bench_runner.py [--steps 30] [--threads N] [--only decode]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from transformers import DynamicCache

from explorer.config import SamplingSettings
from explorer.runner.loading import load
from explorer.runner.session import InferenceSession

TEXT = "The quick brown fox jumps over the lazy dog while the river runs to the sea. "


def prompt_of(tokenizer, n_tokens: int) -> str:
    """A plain-text prompt that tokenises (without a chat template) to exactly n_tokens ids."""
    ids = tokenizer(TEXT * (n_tokens // 8), add_special_tokens=False)["input_ids"][:n_tokens]
    text = tokenizer.decode(ids)
    assert len(tokenizer(text)["input_ids"]) == n_tokens
    return text


def bench_decode(loaded, steps: int) -> None:
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=steps + 20))
    model = loaded.model
    session.prefill("Tell me a long story about a lighthouse keeper.")
    eager = InferenceSession(loaded, SamplingSettings(max_new_tokens=steps + 20))
    eager.prefill("Tell me a long story about a lighthouse keeper.")
    plain_cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.tensor([session.ids[:-1]]), cache=plain_cache, use_cache=True, logits_to_keep=1)
    hooked_ms, plain_ms, eager_ms = [], [], []
    for i in range(steps + 5):
        token = torch.tensor([[session.ids[-1]]])
        start = time.perf_counter()
        with torch.inference_mode():
            model(token, cache=plain_cache, use_cache=True, logits_to_keep=1)
        plain = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        session.decode_step()
        hooked = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        eager.run.lens(eager.decode_step().step_index)
        with_lens = (time.perf_counter() - start) * 1e3
        if i >= 5:  # warm-up
            hooked_ms.append(hooked)
            plain_ms.append(plain)
            eager_ms.append(with_lens)
    h, p, e = statistics.median(hooked_ms), statistics.median(plain_ms), statistics.median(eager_ms)
    ratio = statistics.median(a / b for a, b in zip(hooked_ms, plain_ms, strict=True))
    print(f"decode step, median of {steps} at context {session.traces[5].context_length}.."
          f"{session.traces[-1].context_length}: hooked {h:.1f} ms, plain {p:.1f} ms, "
          f"ratio {h / p:.2f}x, median of the steps' ratios {ratio:.2f}x (target <= 1.2x); "
          f"with its lens asked at once {e:.1f} ms, {e / p:.2f}x")


def bench_prefill(loaded, n_tokens: int) -> None:
    prompt = prompt_of(loaded.tokenizer, n_tokens)
    session = InferenceSession(loaded)
    session.prefill(prompt[:200], use_chat_template=False)  # warm-up
    times = []
    for _ in range(3):
        start = time.perf_counter()
        trace = session.prefill(prompt, use_chat_template=False)
        times.append(time.perf_counter() - start)
    kept = sum(session.attention.store.kept(trace.step_index, r.layer) for r in trace.attention)
    print(f"hooked prefill of {len(trace.input_ids)} tokens: median {statistics.median(times):.2f} s "
          f"(target <= 4 s); attention kept for {kept} of {len(trace.attention)} layers")


def bench_session_memory(loaded, n_prompt: int, n_steps: int) -> None:
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=n_steps + 1))
    session.prefill(prompt_of(loaded.tokenizer, n_prompt), use_chat_template=False)
    for _ in range(n_steps):
        session.decode_step()
    cache_bytes = sum(s.key_bytes + s.value_bytes for s in session.traces[-1].kv)
    trace_bytes = sum(_array_bytes(t) for t in session.traces) + session.attention.store.kept_bytes
    trace_bytes += session.lens_bytes  # the residual rows held for the lenses not yet asked for
    total_mb = (cache_bytes + trace_bytes) / 1e6
    print(f"session after {n_prompt}-token prompt + {n_steps} steps: KV cache {cache_bytes / 1e6:.0f} MB, "
          f"traces and kept attention {trace_bytes / 1e6:.0f} MB, total {total_mb:.0f} MB (target <= 300 MB)")


def _array_bytes(trace) -> int:
    arrays = [trace.logits]
    arrays += [s.logits for s in trace.sampling.stages] if trace.sampling else []
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's); 1 steadies times on a core shared with other work")
    parser.add_argument("--only", choices=("decode", "prefill", "memory"), help="run one of the three")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    loaded = load(device="cpu")  # as the app and the CLI start: then `settle`
    if args.only in (None, "decode"):
        bench_decode(loaded, args.steps)
    if args.only in (None, "prefill"):
        bench_prefill(loaded, 512)
    if args.only in (None, "memory"):
        bench_session_memory(loaded, 2048, 64)


if __name__ == "__main__":
    main()
