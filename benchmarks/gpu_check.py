"""GPU check: the device's measured roofs against its datasheet, and the hooked runner against the
plain model on this machine's accelerator (or its CPU).

First the probe (`explorer.runner.probe`, measured afresh) on the device: bandwidth, matmul FLOP/s
per format and the near-empty operator's time, each beside the datasheet's figure where the device
has a catalogue entry. Then loads a model (--model, else Qwen/Qwen3-0.6B where the Hugging Face cache
holds it, else the embedded SmolLM2) and runs a prefill of --prompt-tokens tokens and --steps decode
steps twice over: hooked (`InferenceSession`: hooks, eager attention with probabilities, sampling,
trace) and plain (`model(...)` with transformers' default SDPA attention on its own `DynamicCache`,
fed the same tokens). Prints the hooked / plain ratio and tokens/s of both, the achieved bandwidth of
each decode GEMM (analytic bytes / measured time, summed over layers and steps) as a fraction of the
measured bandwidth and of the datasheet's, and the peak memory (the probe's tensors excluded). Each
timed call is bracketed by device synchronisations. Designed to finish in under 5 minutes on a CUDA
machine with an 8B model; runs on the CPU too (CPU figures; `--device cpu --prompt-tokens 32
--steps 4` for a quick end-to-end run).

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
from huggingface_hub import try_to_load_from_cache
from transformers import DynamicCache

from explorer.analysis.hardware import THIS_MACHINE, Hardware, get_hardware
from explorer.analysis.measured import measured_points
from explorer.analysis.precision import DTYPE_CHOICES
from explorer.analysis.spec import ModelSpec
from explorer.config import SamplingSettings
from explorer.runner.devices import pick_device, roofline_hardware_key
from explorer.runner.loading import DEFAULT_MODEL, LoadedModel, load_model
from explorer.runner.probe import device_label, probed_device, this_machine
from explorer.runner.session import InferenceSession
from explorer.trace import StepTrace

TEXT = "The quick brown fox jumps over the lazy dog while the river runs to the sea. "
GIB = 2**30
REAL_MODEL = "Qwen/Qwen3-0.6B"  # 0.6 B parameters: decode GEMMs past the GPU's L2 cache


def default_model() -> str:
    """`REAL_MODEL` where the Hugging Face cache holds it (no download), else the embedded model."""
    return REAL_MODEL if isinstance(try_to_load_from_cache(REAL_MODEL, "config.json"), str) else DEFAULT_MODEL


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help=f"hub id or local folder (default: {REAL_MODEL} if cached, else embedded)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES)
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


def report_roofs(measured: Hardware, datasheet: Hardware | None) -> None:
    """The probe's roofs, each beside the datasheet's figure and their ratio where there is one."""
    print(f"roofs measured here: {measured.name}" + (f", against the datasheet of {datasheet.name}:" if datasheet
                                                      else " (no datasheet entry for this device):"))
    rows = [("memory bandwidth", "GB/s", 1e9, measured.memory_bandwidth_bytes_per_s,
             datasheet.memory_bandwidth_bytes_per_s if datasheet else 0.0)]
    rows += [(f"{fmt} matmul", "TFLOP/s", 1e12, rate, datasheet.dense_flops_per_s.get(fmt, 0.0) if datasheet else 0.0)
             for fmt, rate in measured.dense_flops_per_s.items()]
    if measured.cache_bandwidth_bytes_per_s:
        rows.append(("cache bandwidth", "GB/s", 1e9, measured.cache_bandwidth_bytes_per_s, 0.0))
    for what, unit, scale, value, sheet in rows:
        against = f"  datasheet {sheet / scale:10.4g} {unit}  measured/datasheet {value / sheet:.3f}" if sheet else ""
        print(f"  {what:<18} {value / scale:10.4g} {unit}{against}")
    print(f"  near-empty operator {measured.op_overhead_s * 1e6:.2f} µs (nn.Linear(1, 1), launch and Python)")


def report(loaded: LoadedModel, roofs: list[Hardware], session: InferenceSession, ms: dict[str, list[float]]) -> None:
    prefill, decodes = session.traces[0], session.traces[1:]
    tokens = len(prefill.input_ids)
    hooked, plain = ms["hooked_prefill"][0], ms["plain_prefill"][0]
    print(f"prefill of {tokens} tokens: hooked {hooked:.1f} ms, plain {plain:.1f} ms, ratio {hooked / plain:.2f}x; "
          f"hooked {tokens / hooked * 1e3:.1f} tokens/s, plain {tokens / plain * 1e3:.1f} tokens/s")
    hooked, plain = statistics.median(ms["hooked_decode"]), statistics.median(ms["plain_decode"])
    print(f"decode, median of {len(decodes)} steps at context {decodes[0].context_length}.."
          f"{decodes[-1].context_length}: hooked {hooked:.2f} ms, plain {plain:.2f} ms, ratio {hooked / plain:.2f}x; "
          f"hooked {1e3 / hooked:.1f} tokens/s, plain {1e3 / plain:.1f} tokens/s")
    peaks = [roof.memory_bandwidth_bytes_per_s for roof in roofs]
    print("decode GEMM bandwidth (analytic bytes / hooked time, all layers and steps) as a fraction of "
          + " and of ".join(f"{roof.name}'s {peak / 1e9:.1f} GB/s" for roof, peak in zip(roofs, peaks, strict=True))
          + ":")
    spec = ModelSpec.from_hf_config(loaded.model.config.to_dict())
    for op, bytes_per_s in gemm_bandwidths(decodes, spec).items():
        above = "  (above: weights partly cache-resident)" if bytes_per_s > peaks[0] else ""
        fractions = "  ".join(f"{bytes_per_s / peak:.3f}" for peak in peaks)
        print(f"  {op:<16} {bytes_per_s / 1e9:9.2f} GB/s  {fractions}{above}")
    peak_bytes, what = peak_memory(torch.device(loaded.device))
    print(f"peak memory: {peak_bytes / GIB:.2f} GiB ({what})")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    device = pick_device(args.device)
    key = roofline_hardware_key(device)
    datasheet = None if key == THIS_MACHINE else get_hardware(key)
    print(f"device: {device} (probed: {device_label(probed_device(device))}); catalogue entry: {key}")
    measured = this_machine(device, refresh=True)
    report_roofs(measured, datasheet)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)  # the peak below is the model's, not the probe's
    loaded = load_model(args.model or default_model(), device=device, dtype=args.dtype,
                        progress=lambda message: print(message, file=sys.stderr))
    loaded.eos_token_ids = []  # timing steps, not answers: generation must not end early
    print(f"model: {loaded.description}")
    warm_up(loaded)
    session, ms = run_both(loaded, prompt_of(loaded.tokenizer, args.prompt_tokens), args.steps)
    report(loaded, [measured] + ([datasheet] if datasheet else []), session, ms)
    print(f"total time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
