"""GPU check: the hooked runner against the plain model on this machine's accelerator (or its CPU).

Loads a model (--model, else the embedded SmolLM2), then runs a prefill of --prompt-tokens tokens
and --steps decode steps twice over: hooked (`InferenceSession`: hooks, eager attention with
probabilities, sampling, trace) and plain (`model(...)` with transformers' default SDPA attention on
its own `DynamicCache`, fed the same tokens). Prints the hooked / plain ratio and tokens/s of both,
the achieved bandwidth of each decode GEMM (analytic bytes / measured time, summed over layers and
steps) as a fraction of the device's peak (its catalogue entry, else this machine's probe), and the
peak memory. Each timed call is bracketed by device synchronisations. Designed to finish in under
5 minutes on a CUDA machine with an 8B model; runs on the CPU too (CPU figures).

Run: python benchmarks/gpu_check.py [--model ID_OR_FOLDER] [--device auto] [--dtype auto]
                                    [--prompt-tokens 512] [--steps 64]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections import defaultdict

import torch
from transformers import DynamicCache

from explorer.analysis.hardware import Hardware
from explorer.analysis.measured import measured_points
from explorer.analysis.spec import ModelSpec
from explorer.config import SamplingSettings
from explorer.runner.devices import roofline_hardware_key
from explorer.runner.loading import DEFAULT_MODEL, LoadedModel, load_model
from explorer.runner.probe import resolve_hardware
from explorer.runner.session import InferenceSession
from explorer.trace import StepTrace

TEXT = "The quick brown fox jumps over the lazy dog while the river runs to the sea. "
GIB = 2**30


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="hub id or local folder (default: embedded)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=64)
    return parser.parse_args(argv)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that a host clock reading includes it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed_ms(device: torch.device, run, *args) -> float:
    """Milliseconds of `run(*args)`, bracketed by device synchronisations."""
    synchronize(device)
    start = time.perf_counter()
    run(*args)
    synchronize(device)
    return (time.perf_counter() - start) * 1e3


def prompt_of(tokenizer, n_tokens: int) -> str:
    """Plain text of about `n_tokens` tokens (the session's own tokenisation gives the exact count)."""
    ids = tokenizer(TEXT * (n_tokens // 8 + 1), add_special_tokens=False)["input_ids"][:n_tokens]
    return tokenizer.decode(ids)


def peak_memory(device: torch.device) -> tuple[float, str]:
    """(bytes, what was measured): CUDA's peak allocation (all devices), else the process's peak resident set."""
    if device.type == "cuda":
        peak = sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
        return float(peak), "torch.cuda.max_memory_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return float(rss if sys.platform == "darwin" else rss * 1024), "process RSS peak (getrusage ru_maxrss)"


def run_both(loaded: LoadedModel, prompt: str, steps: int) -> tuple[InferenceSession, dict[str, list[float]]]:
    """Hooked prefill and decode steps through a session; plain ones through `model(...)` fed the
    same tokens at the same cache length. Returns the session and the ms of each call by kind."""
    device, model = torch.device(loaded.device), loaded.model
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=steps + 1))
    ms = defaultdict(list)
    ms["hooked_prefill"].append(timed_ms(device, lambda: session.prefill(prompt, use_chat_template=False)))
    cache = DynamicCache(config=model.config)
    prompt_ids = torch.tensor([session.ids[:-1]], device=device)

    def plain(ids: torch.Tensor) -> None:
        with torch.inference_mode():
            model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)

    ms["plain_prefill"].append(timed_ms(device, plain, prompt_ids))
    for _ in range(steps):
        token = torch.tensor([[session.generated[-1]]], device=device)
        ms["plain_decode"].append(timed_ms(device, plain, token))
        ms["hooked_decode"].append(timed_ms(device, session.decode_step))
    return session, ms


def warm_up(loaded: LoadedModel) -> None:
    """One short hooked prefill and decode step (kernel selection, allocator, first-call costs)."""
    session = InferenceSession(loaded, SamplingSettings(max_new_tokens=2))
    session.prefill(TEXT, use_chat_template=False)
    session.decode_step()


def gemm_bandwidths(traces: list[StepTrace], spec: ModelSpec) -> dict[str, float]:
    """Decode GEMM name ("attn.q_proj", "lm_head") -> achieved bytes/s over all layers and steps."""
    moved, seconds = defaultdict(float), defaultdict(float)
    for trace in traces:
        for point in measured_points(trace, spec):
            if point.cost.kind == "gemm":
                moved[point.cost.op] += point.cost.bytes
                seconds[point.cost.op] += point.wall_ms / 1e3
    return {op: moved[op] / seconds[op] for op in moved}


def report(loaded: LoadedModel, hardware: Hardware, session: InferenceSession, ms: dict[str, list[float]]) -> None:
    prefill, decodes = session.traces[0], session.traces[1:]
    tokens = len(prefill.input_ids)
    hooked, plain = ms["hooked_prefill"][0], ms["plain_prefill"][0]
    print(f"prefill of {tokens} tokens: hooked {hooked:.1f} ms, plain {plain:.1f} ms, ratio {hooked / plain:.2f}x; "
          f"hooked {tokens / hooked * 1e3:.1f} tokens/s, plain {tokens / plain * 1e3:.1f} tokens/s")
    hooked, plain = statistics.median(ms["hooked_decode"]), statistics.median(ms["plain_decode"])
    print(f"decode, median of {len(decodes)} steps at context {decodes[0].context_length}.."
          f"{decodes[-1].context_length}: hooked {hooked:.2f} ms, plain {plain:.2f} ms, ratio {hooked / plain:.2f}x; "
          f"hooked {1e3 / hooked:.1f} tokens/s, plain {1e3 / plain:.1f} tokens/s")
    peak = hardware.memory_bandwidth_bytes_per_s
    print(f"decode GEMM bandwidth (analytic bytes / hooked time, all layers and steps) against "
          f"{hardware.name}'s {peak / 1e9:.1f} GB/s:")
    spec = ModelSpec.from_hf_config(loaded.model.config.to_dict())
    for op, bytes_per_s in gemm_bandwidths(decodes, spec).items():
        above = "  (above the peak: weights partly cache-resident, or a low peak figure)" if bytes_per_s > peak else ""
        print(f"  {op:<16} {bytes_per_s / 1e9:9.2f} GB/s  {bytes_per_s / peak:.3f} of peak{above}")
    peak_bytes, what = peak_memory(torch.device(loaded.device))
    print(f"peak memory: {peak_bytes / GIB:.2f} GiB ({what})")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype,
                        progress=lambda message: print(message, file=sys.stderr))
    loaded.eos_token_ids = []  # timing steps, not answers: generation must not end early
    device = torch.device(loaded.device)
    hardware = resolve_hardware(roofline_hardware_key(loaded.device))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    print(f"model: {loaded.description}")
    print(f"device: {loaded.device} ({name}); roofline entry: {hardware.key} ({hardware.name})")
    warm_up(loaded)
    session, ms = run_both(loaded, prompt_of(loaded.tokenizer, args.prompt_tokens), args.steps)
    report(loaded, hardware, session, ms)
    print(f"total time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
