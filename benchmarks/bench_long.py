"""Long-prompt benchmarks on the embedded model (issue 5's table; prints measurements, never asserts).

One session runs a `--prompt-tokens` prompt (default 2,048, no chat template) and `--steps` greedy
decode steps (default 64); a plain model (default SDPA attention, no hooks, its own `DynamicCache`)
is fed the same tokens beside it, as in bench_runner.py. Measured:

1. hooked / plain decode step: the median of the ratio of each step's pair (a plain step, then the
   hooked one at the same n), steps 2..N (step 1 is the warm-up); pairs keep a busy machine's drift out.
2. hooked prefill of the prompt (one run, after a short warm-up prefill).
3. session memory after the prompt and the steps: KV cache bytes, the post-RoPE queries the session
   keeps to recompute attention, plus every trace's arrays (logits, sampling stages, kept attention),
   each array counted once (the raw sampling stage and
   `trace.logits` are one array), plus the Python objects around them (op records, shapes: ~0.4 MB
   a step, by `sys.getsizeof`; bench_runner.py leaves these out).
4. the attention redraw the app makes (`explorer.ui.views.attention_view` over a `Visit`, layer
   `--layer`, one panel per head): bytes of `gr.Plot().postprocess(fig).model_dump_json()` (what
   Gradio sends) and of `fig.to_json()`, and the time to build the figure, which includes
   recomputing attention the session gave up to stay within its budget; and the same redraw at the
   last layer after the last step.
5. step `--steps` time / step 1 time (greedy both): decode alone, and decode + that redraw. Single
   steps are noisy, so "step 1" is the median over steps 1..5 and "step N" over steps N-4..N; the
   redraw is of the step just taken, after each of those steps.

Run: python benchmarks/bench_long.py [--prompt-tokens 2048] [--steps 64] [--layer 0] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import gradio as gr
import numpy as np
import torch
from bench_runner import prompt_of
from transformers import DynamicCache

from explorer.config import SamplingSettings
from explorer.figures.views import ViewOptions
from explorer.runner.loading import load
from explorer.runner.session import InferenceSession
from explorer.ui.hosting import LOCAL
from explorer.ui.views import Visit, render

WINDOW = 5  # decode steps whose median stands for "step 1" / "step N"


def session_bytes(session: InferenceSession) -> tuple[int, int, int, int]:
    """(KV cache bytes, kept query bytes, bytes of every trace array (each counted once), kept attention
    matrix and lens residual row, bytes of the traces' Python objects around the arrays: op records, shapes, strings)."""
    cache_bytes = sum(s.key_bytes + s.value_bytes for s in session.traces[-1].kv)
    arrays = {}
    for trace in session.traces:
        candidates = [trace.logits]
        candidates += [s.logits for s in trace.sampling.stages] if trace.sampling else []
        arrays.update({id(a): a for a in candidates if isinstance(a, np.ndarray)})
    array_bytes = sum(a.nbytes for a in arrays.values()) + session.attention.store.kept_bytes + session.lens_bytes
    return (cache_bytes, session.query_bytes, array_bytes,
            object_bytes(session.traces, set()))


def object_bytes(value, seen: set[int]) -> int:
    """`sys.getsizeof` summed over everything `value` holds, numpy arrays left out, each object once."""
    if id(value) in seen or isinstance(value, np.ndarray):
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        return size + sum(object_bytes(k, seen) + object_bytes(v, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return size + sum(object_bytes(item, seen) for item in value)
    if hasattr(value, "__dict__"):
        return size + object_bytes(vars(value), seen)
    slots = getattr(type(value), "__slots__", ())
    return size + sum(object_bytes(getattr(value, name), seen) for name in slots if hasattr(value, name))


def redraw(visit: Visit, step: int, layer: int) -> tuple[float, int, int]:
    """(seconds to build the attention figure, Gradio payload bytes, fig.to_json() bytes)."""
    start = time.perf_counter()
    fig = render(visit, ViewOptions(step, layer, False, "this-machine"), "attention")
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


def prefill(loaded, prompt: str, n_steps: int) -> tuple[InferenceSession, float, float]:
    """A session after the prompt's hooked prefill (after a short warm-up run and redraw), with the prefill's wall
    and process CPU seconds (CPU time says how much of the 2 cores the run got on a shared machine)."""
    warm = InferenceSession(loaded, SamplingSettings(max_new_tokens=4))
    warm.prefill(prompt[:400], use_chat_template=False)
    warm.decode_step()
    redraw(Visit.start(warm, LOCAL), 1, 0)  # the first figure build pays one-time costs
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=n_steps + 1))
    wall, cpu = time.perf_counter(), time.process_time()
    session.prefill(prompt, use_chat_template=False)
    return session, time.perf_counter() - wall, time.process_time() - cpu


def decode(session: InferenceSession, n_steps: int, layer: int) -> tuple[list[float], list[float], dict]:
    """Hooked and plain decode step times (ms) for steps 1..n_steps, fed the same tokens, and the
    attention redraw (`redraw`) of the step just taken after each of the first and last WINDOW steps,
    by step."""
    model = session.loaded.model
    plain_cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.tensor([session.ids[:-1]]), cache=plain_cache, use_cache=True, logits_to_keep=1)
    visit = Visit.start(session, LOCAL)
    hooked_ms, plain_ms, redraws = [], [], {}
    for step in range(1, n_steps + 1):
        plain_ms.append(plain_step(model, plain_cache, session.ids[-1]))
        hooked_ms.append(hooked_step(session))
        if step <= WINDOW or step > n_steps - WINDOW:
            redraws[step] = redraw(visit, step, layer)
    return hooked_ms, plain_ms, redraws


def run(loaded, n_prompt: int, n_steps: int, layer: int) -> list[tuple[str, str, str]]:
    """Every measurement of the module docstring, as (what, measured, target) rows."""
    session, prefill_s, prefill_cpu_s = prefill(loaded, prompt_of(loaded.tokenizer, n_prompt), n_steps)
    hooked_ms, plain_ms, redraws = decode(session, n_steps, layer)
    cache_bytes, query_bytes, trace_bytes, objects_bytes = session_bytes(session)
    kept = sum(session.attention.store.kept(t.step_index, r.layer) for t in session.traces for r in t.attention)
    total = sum(len(t.attention) for t in session.traces)
    n = session.traces[0].context_length
    ratio = statistics.median(h / p for h, p in zip(hooked_ms[1:], plain_ms[1:], strict=True))
    hooked, plain = statistics.median(hooked_ms[1:]), statistics.median(plain_ms[1:])
    first, last = statistics.median(hooked_ms[:WINDOW]), statistics.median(hooked_ms[-WINDOW:])
    plain_first, plain_last = statistics.median(plain_ms[:WINDOW]), statistics.median(plain_ms[-WINDOW:])
    with_draw = [statistics.median(hooked_ms[step - 1] / 1e3 + redraws[step][0] for step in steps)
                 for steps in (range(1, WINDOW + 1), range(n_steps - WINDOW + 1, n_steps + 1))]
    rows = [
        (f"hooked / plain decode step at n={n + 2}..{n + n_steps} (median of {n_steps - 1} pairs)",
         f"{ratio:.2f}x (medians {hooked:.0f} / {plain:.0f} ms)", "<= 1.3x"),
        (f"hooked prefill of {n} tokens", f"{prefill_s:.1f} s (process CPU {prefill_cpu_s:.1f} s)", "<= 15 s"),
        (f"session memory, {n} tokens + {n_steps} steps",
         f"{(cache_bytes + query_bytes + trace_bytes + objects_bytes) / 1e6:.0f} MB (KV {cache_bytes / 1e6:.0f} "
         f"MB + queries {query_bytes / 1e6:.0f} MB + trace arrays {trace_bytes / 1e6:.0f} MB + trace objects {objects_bytes / 1e6:.0f} MB; attention kept "
         f"for {kept} of {total} step-layers)", "<= 300 MB"),
    ]
    rows += [(f"attention redraw at step {step}, layer {layer}: Gradio payload / fig.to_json()",
              f"{gradio / 1e3:.0f} KB / {json / 1e3:.0f} KB, built in {seconds:.2f} s", "<= 500 KB")
             for step, (seconds, gradio, json) in redraws.items() if step in (1, n_steps)]
    last_layer = len(session.traces[0].attention) - 1
    seconds, gradio, json = redraw(Visit.start(session, LOCAL), n_steps, last_layer)
    rows.append((f"attention redraw at step {n_steps}, layer {last_layer} (prefill block recomputed)",
                 f"{gradio / 1e3:.0f} KB / {json / 1e3:.0f} KB, built in {seconds:.2f} s", "<= 500 KB"))
    return rows + [
        (f"step {n_steps} / step 1, hooked decode (median of {WINDOW} steps each)",
         f"{last / first:.2f}x ({last:.0f} / {first:.0f} ms)", "<= 1.2x"),
        (f"step {n_steps} / step 1, plain decode (the model's own n-dependence)",
         f"{plain_last / plain_first:.2f}x ({plain_last:.0f} / {plain_first:.0f} ms)", "(reference)"),
        (f"step {n_steps} / step 1, hooked decode + attention redraw (median of {WINDOW} each)",
         f"{with_draw[1] / with_draw[0]:.2f}x ({with_draw[1]:.2f} / {with_draw[0]:.2f} s)", "<= 1.2x"),
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
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's); 1 steadies times on a core shared with other work")
    args = parser.parse_args()
    if args.steps < 11 + WINDOW:
        parser.error(f"--steps must be at least {11 + WINDOW} (a 10-step ratio window after a warm-up step)")
    torch.set_grad_enabled(False)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    loaded = load(device="cpu")  # as the app and the CLI start: then `settle`
    print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores; above 2, other work shares them)")
    print_table(run(loaded, args.prompt_tokens, args.steps, args.layer))
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
