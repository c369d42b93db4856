"""Long-prompt benchmarks on the embedded model (issue 5's table; prints measurements, never asserts).

One session runs a `--prompt-tokens` prompt (default 2,048, no chat template) and `--steps` greedy
decode steps (default 64); a plain model (default SDPA attention, no hooks, its own `DynamicCache`)
is fed the same tokens beside it, as in bench_runner.py. Measured:

1. hooked / plain decode step: median over decode steps 2..11 (step 1 is the warm-up).
2. hooked prefill of the prompt (one run, after a short warm-up prefill).
3. session memory after the prompt and the steps: KV cache bytes plus every trace's arrays (logits,
   sampling stages, kept attention), each array counted once (the raw sampling stage and
   `trace.logits` are one array).
4. the attention redraw the app makes (`explorer.ui.views.attention_view` over a `Visit`, layer
   `--layer`, one panel per head): bytes of `gr.Plot().postprocess(fig).model_dump_json()` (what
   Gradio sends) and of `fig.to_json()`, and the time to build the figure, which includes
   recomputing attention the session gave up to stay within its budget.
5. step `--steps` time / step 1 time (greedy both): decode alone, and decode + that redraw. Single
   steps are noisy, so a decode step's time here is the median of five neighbouring steps
   (1..5 and steps-4..steps); the redraw is timed once, right after step 1 and right after the last.

Run: python benchmarks/bench_long.py [--prompt-tokens 2048] [--steps 64] [--layer 0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gradio as gr
import numpy as np
import torch
from bench_runner import prompt_of
from transformers import DynamicCache

from explorer.config import SamplingSettings
from explorer.runner.loading import load_model
from explorer.runner.session import InferenceSession
from explorer.ui.hosting import LOCAL
from explorer.ui.views import ViewOptions, Visit, attention_view

WINDOW = 5  # decode steps whose median stands for "step 1" / "step N"


def session_bytes(session: InferenceSession) -> tuple[int, int]:
    """(KV cache bytes, bytes of every trace array, each array counted once)."""
    cache_bytes = sum(s.key_bytes + s.value_bytes for s in session.traces[-1].kv)
    arrays = {}
    for trace in session.traces:
        candidates = [trace.logits] + [r.probs for r in trace.attention]
        candidates += [s.logits for s in trace.sampling.stages] if trace.sampling else []
        arrays.update({id(a): a for a in candidates if isinstance(a, np.ndarray)})
    return cache_bytes, sum(a.nbytes for a in arrays.values())


def redraw(visit: Visit, step: int, layer: int) -> tuple[float, int, int]:
    """(seconds to build the attention figure, Gradio payload bytes, fig.to_json() bytes)."""
    start = time.perf_counter()
    fig = attention_view(visit, ViewOptions(step, layer, False, "this-machine"))
    seconds = time.perf_counter() - start
    return seconds, len(gr.Plot().postprocess(fig).model_dump_json()), len(fig.to_json())


def plain_step(model, cache: DynamicCache, token: int) -> float:
    """Milliseconds of one plain `model(...)` decode step on `cache`."""
    start = time.perf_counter()
    with torch.inference_mode():
        model(torch.tensor([[token]]), cache=cache, use_cache=True, logits_to_keep=1)
    return (time.perf_counter() - start) * 1e3


def hooked_step(session: InferenceSession) -> float:
    """Milliseconds of one `InferenceSession.decode_step`."""
    start = time.perf_counter()
    session.decode_step()
    return (time.perf_counter() - start) * 1e3


def run(loaded, n_prompt: int, n_steps: int, layer: int) -> list[tuple[str, str, str]]:
    """Every measurement of the module docstring, as (what, measured, target) rows."""
    model, prompt = loaded.model, prompt_of(loaded.tokenizer, n_prompt)
    warm = InferenceSession(loaded, SamplingSettings(max_new_tokens=4))
    warm.prefill(prompt[:400], use_chat_template=False)
    warm.decode_step()
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=n_steps + 1))
    start = time.perf_counter()
    prefill = session.prefill(prompt, use_chat_template=False)
    prefill_s = time.perf_counter() - start
    plain_cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.tensor([session.ids[:-1]]), cache=plain_cache, use_cache=True, logits_to_keep=1)
    visit = Visit.start(session, LOCAL)
    hooked_ms, plain_ms, redraws = [], [], {}
    for step in range(1, n_steps + 1):
        plain_ms.append(plain_step(model, plain_cache, session.ids[-1]))
        hooked_ms.append(hooked_step(session))
        if step in (1, n_steps):
            redraws[step] = redraw(visit, step, layer)
    cache_bytes, trace_bytes = session_bytes(session)
    kept = sum(r.probs is not None for t in session.traces for r in t.attention)
    total = sum(len(t.attention) for t in session.traces)
    ratio_window = slice(1, 11)
    hooked, plain = statistics.median(hooked_ms[ratio_window]), statistics.median(plain_ms[ratio_window])
    first, last = statistics.median(hooked_ms[:WINDOW]), statistics.median(hooked_ms[-WINDOW:])
    plain_first, plain_last = statistics.median(plain_ms[:WINDOW]), statistics.median(plain_ms[-WINDOW:])
    (draw1_s, gradio1, json1), (drawn_s, gradion, jsonn) = redraws[1], redraws[n_steps]
    n = prefill.context_length
    return [
        (f"hooked / plain decode step at n={n + 2}..{n + 11} (median of 10)",
         f"{hooked / plain:.2f}x ({hooked:.0f} / {plain:.0f} ms)", "<= 1.3x"),
        (f"hooked prefill of {n} tokens", f"{prefill_s:.1f} s", "<= 15 s"),
        (f"session memory, {n} tokens + {n_steps} steps",
         f"{(cache_bytes + trace_bytes) / 1e6:.0f} MB (KV {cache_bytes / 1e6:.0f} MB + traces "
         f"{trace_bytes / 1e6:.0f} MB; attention kept for {kept} of {total} step-layers)", "<= 300 MB"),
        (f"attention redraw at step 1, layer {layer}: Gradio payload / fig.to_json()",
         f"{gradio1 / 1e3:.0f} KB / {json1 / 1e3:.0f} KB, built in {draw1_s:.1f} s", "<= 500 KB"),
        (f"attention redraw at step {n_steps}, layer {layer}: Gradio payload / fig.to_json()",
         f"{gradion / 1e3:.0f} KB / {jsonn / 1e3:.0f} KB, built in {drawn_s:.1f} s", "<= 500 KB"),
        (f"step {n_steps} / step 1, hooked decode (median of {WINDOW} steps each)",
         f"{last / first:.2f}x ({last:.0f} / {first:.0f} ms)", "<= 1.2x"),
        (f"step {n_steps} / step 1, plain decode (the model's own n-dependence)",
         f"{plain_last / plain_first:.2f}x ({plain_last:.0f} / {plain_first:.0f} ms)", "(reference)"),
        (f"step {n_steps} / step 1, hooked decode + attention redraw",
         f"{(hooked_ms[-1] / 1e3 + drawn_s) / (hooked_ms[0] / 1e3 + draw1_s):.2f}x "
         f"({hooked_ms[-1] / 1e3 + drawn_s:.1f} / {hooked_ms[0] / 1e3 + draw1_s:.1f} s)", "<= 1.2x"),
    ]


def print_table(rows: list[tuple[str, str, str]]) -> None:
    """The rows as a three-column text table."""
    widths = [max(len(row[i]) for row in rows + [("what", "measured", "target")]) for i in range(3)]
    for row in [("what", "measured", "target"), tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--layer", type=int, default=0, help="attention view layer (the app starts at 0)")
    args = parser.parse_args()
    if args.steps < 11 + WINDOW:
        parser.error(f"--steps must be at least {11 + WINDOW} (a 10-step ratio window after a warm-up step)")
    torch.set_grad_enabled(False)
    loaded = load_model(device="cpu")
    print_table(run(loaded, args.prompt_tokens, args.steps, args.layer))


if __name__ == "__main__":
    main()
