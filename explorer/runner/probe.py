""""This machine": the measured roofs of the device a model runs on (peak matmul FLOP/s, memory and
cache bandwidth, the time of a near-empty operator), measured once with torch and cached per device.

Each rate is the best of a few repeats (a peak), under `torch.inference_mode` as the runner runs the
model; `measure` takes the timer apart from the arithmetic (rate = work / best seconds), so a test
can give it a fake clock. What is run, by device (`CPU_PLAN`, `CUDA_PLAN`):
- CPU, torch's own threads (all cores), wall time (`time.perf_counter`), about four seconds:
  float32 matmuls of 1024x1024 matrices (2 * 1024^3 FLOPs each); memory bandwidth the better of a
  copy of 256 MiB (read + write: 2 * 256 MiB moved) and a matrix-vector product over an 8192 x 8192
  float32 matrix (256 MiB read, what a decode step's weight GEMMs do), both larger than the caches;
  cache bandwidth: the same product over a 1024 x 1024 matrix (4 MiB, a weight that stays in the caches).
- CUDA, on the model's device, timed with CUDA events recorded around each call (the host waits for
  the end event), about two seconds: bfloat16 and float32 matmuls of 8192x8192 matrices (float32 as
  PyTorch runs it by default: no TF32); memory bandwidth the better of a device-to-device copy of
  1 GiB (2 GiB moved) and a matrix-vector product over a 1 GiB bfloat16 matrix. No cache roof.
- Both: operator overhead, the median time of an `nn.Linear(1, 1)` call on a [1, 1] input, what every
  operator pays in Python dispatch and kernel launch whatever its size.
MPS is not probed: a model on MPS (or shape-only) gets the CPU's probe.

One JSON file per device in the user cache dir (`EXPLORER_CACHE_DIR` overrides it), named after the
device ("cpu", or the CUDA device's name, e.g. "nvidia-h200"); where that cannot be written (a
read-only cache), the result is kept in memory for the life of the process instead.
"""

from __future__ import annotations

import json
import logging
import os
import re
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import psutil
import torch

from explorer.analysis.hardware import THIS_MACHINE, Hardware, get_hardware, hardware_from_dict
from explorer.analysis.precision import canonical_dtype
from explorer.config import cache_dir

log = logging.getLogger(__name__)

CACHE_VERSION = "v3"  # v3: one file per device, CUDA probed on the GPU
MIB = 2**20
_OVERHEAD_CALLS = 200
_MAX_REPEATS = 10_000  # a timer that reads 0 s must not loop for ever
# Probe results that could not be written to their cache file, by that file's path.
_in_memory: dict[str, dict] = {}

Timer = Callable[[Callable[[], object]], float]  # seconds of one call of its argument


@dataclass(frozen=True)
class ProbePlan:
    """What the probe runs on one kind of device.

    Attributes:
        matmul_size: n of the [n, n] @ [n, n] matmuls (2 * n^3 FLOPs each).
        matmul_dtypes: their dtypes, one "dense_flops_per_s" entry each.
        copy_bytes: bytes of the copied tensor (read and written: twice this moved).
        gemv_shape: [rows, cols] of the matrix of the matrix-vector product past the caches.
        gemv_dtype: its dtype (the one the device's models run in).
        cache_gemv_size: n of an [n, n] matrix that stays in the caches; 0: no cache roof measured.
        budget_s: timed seconds per measurement (at least three repeats).
    """

    matmul_size: int
    matmul_dtypes: tuple[torch.dtype, ...]
    copy_bytes: int
    gemv_shape: tuple[int, int]
    gemv_dtype: torch.dtype
    cache_gemv_size: int
    budget_s: float


CPU_PLAN = ProbePlan(1024, (torch.float32,), 256 * MIB, (8192, 8192), torch.float32, 1024, 0.4)
CUDA_PLAN = ProbePlan(8192, (torch.bfloat16, torch.float32), 1024 * MIB, (16384, 32768), torch.bfloat16, 0, 0.2)


def wall_timer(run: Callable[[], object]) -> float:
    """Seconds of `run()` by the host's clock (the CPU's work is done when it returns)."""
    tick = time.perf_counter()
    run()
    return time.perf_counter() - tick


def cuda_timer(device: str) -> Timer:
    """Seconds of `run()` on `device` between two CUDA events recorded on its current stream around
    the call; the host waits for the second one."""
    stream = torch.cuda.current_stream(torch.device(device))

    def timed(run: Callable[[], object]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        run()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in ms

    return timed


def best_seconds(run: Callable[[], object], timer: Timer, budget_s: float) -> float:
    """The shortest of repeated `timer(run)` readings: at least three, until they add up to `budget_s`."""
    times: list[float] = []
    while len(times) < 3 or (sum(times) < budget_s and len(times) < _MAX_REPEATS):
        times.append(timer(run))
    return max(min(times), 1e-12)


def probed_device(device: str) -> str:
    """The device the probe measures for a model on `device`: a CUDA device present here as
    "cuda:N", else "cpu" (MPS, `meta` for shape-only, a saved run's GPU that is not here)."""
    target = torch.device(device)
    if target.type == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device() if target.index is None else target.index
        if index < torch.cuda.device_count():
            return f"cuda:{index}"
    return "cpu"


def device_label(device: str) -> str:
    """"cpu", or the CUDA device's name as its driver gives it ("NVIDIA H200")."""
    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"


def cache_path(device: str) -> Path:
    """The probe's cache file of `device` (a `probed_device` result): named after the device."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_label(device).lower()).strip("-")
    return cache_dir() / f"probe_{CACHE_VERSION}_{slug}.json"


def measure(device: str = "cpu", timer: Timer | None = None, plan: ProbePlan | None = None) -> dict:
    """Run the probe on `device` ("cpu" or "cuda:N"); returns a hardware entry (numbers as [value,
    source] pairs, `explorer.analysis.hardware.hardware_from_dict`).

    Args:
        device: where to measure.
        timer: seconds of one call; default `wall_timer` on the CPU, `cuda_timer` on CUDA.
        plan: what to run; default `CPU_PLAN` or `CUDA_PLAN`.
    """
    cuda = device.startswith("cuda")
    plan = plan or (CUDA_PLAN if cuda else CPU_PLAN)
    timer = timer or (cuda_timer(device) if cuda else wall_timer)
    with torch.inference_mode(), (torch.cuda.device(device) if cuda else nullcontext()):
        flops = {canonical_dtype(str(dtype)): _matmul_flops_per_s(device, plan, dtype, timer)
                 for dtype in plan.matmul_dtypes}
        copy = _copy_bytes_per_s(device, plan, timer)
        memory_gemv = _gemv_bytes_per_s(device, plan.gemv_shape, plan.gemv_dtype, timer, plan.budget_s)
        cache_gemv = (_gemv_bytes_per_s(device, (plan.cache_gemv_size,) * 2, plan.gemv_dtype, timer, plan.budget_s)
                      if plan.cache_gemv_size else 0.0)
        overhead = _overhead_s(device, timer)
    if cuda:
        torch.cuda.empty_cache()  # the probe's tensors must not hold memory the model's KV cache needs
    return _entry(device, plan, flops, (copy, memory_gemv, cache_gemv), overhead)


def _matmul_flops_per_s(device: str, plan: ProbePlan, dtype: torch.dtype, timer: Timer) -> float:
    """2 * n^3 FLOPs over the best seconds of an [n, n] @ [n, n] matmul in `dtype`."""
    n = plan.matmul_size
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    out = torch.empty_like(a)
    return 2.0 * n**3 / best_seconds(lambda: torch.matmul(a, b, out=out), timer, plan.budget_s)


def _copy_bytes_per_s(device: str, plan: ProbePlan, timer: Timer) -> float:
    """Bytes read and written (2 * copy_bytes) over the best seconds of one copy on `device`."""
    src = torch.ones(plan.copy_bytes // 4, device=device)
    dst = torch.empty_like(src)
    return 2.0 * plan.copy_bytes / best_seconds(lambda: dst.copy_(src), timer, plan.budget_s)


def _gemv_bytes_per_s(device: str, shape: tuple[int, int], dtype: torch.dtype, timer: Timer,
                      budget_s: float) -> float:
    """The weight's bytes over the best seconds of `F.linear` of one row over a [rows, cols] weight."""
    weight, row = torch.ones(shape, device=device, dtype=dtype), torch.ones(1, shape[1], device=device, dtype=dtype)
    run = lambda: torch.nn.functional.linear(row, weight)  # noqa: E731
    return weight.numel() * weight.element_size() / best_seconds(run, timer, budget_s)


def _overhead_s(device: str, timer: Timer) -> float:
    """Median seconds of an `nn.Linear(1, 1)` call on a [1, 1] input."""
    layer, x = torch.nn.Linear(1, 1, device=device), torch.zeros(1, 1, device=device)
    return statistics.median(timer(lambda: layer(x)) for _ in range(_OVERHEAD_CALLS))


def _entry(device: str, plan: ProbePlan, flops: dict[str, float], bandwidths: tuple[float, float, float],
           overhead: float) -> dict:
    """The hardware entry of the measured numbers, each with what was measured, where and when."""
    copy, memory_gemv, cache_gemv = bandwidths
    cuda = device.startswith("cuda")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    how = (f"on {device_label(device)} ({device}), CUDA events" if cuda
           else f"on the CPU, {torch.get_num_threads()} threads")
    here = f"measured here by torch {how}, {when}"
    gemv = f"{plan.gemv_shape[0]} x {plan.gemv_shape[1]} {str(plan.gemv_dtype).removeprefix('torch.')}"
    entry = {
        "name": (f"This machine ({device_label(device)}, measured)" if cuda
                 else f"This machine (CPU, {os.cpu_count()} cores, torch)"),
        "memory_bytes": ([float(torch.cuda.get_device_properties(device).total_memory),
                          "torch.cuda.get_device_properties(...).total_memory"] if cuda
                         else [float(psutil.virtual_memory().total), "psutil.virtual_memory().total"]),
        "memory_bandwidth_bytes_per_s": [max(copy, memory_gemv), (
            f"{here}: the better of a {plan.copy_bytes // MIB} MiB copy (read + write, {copy / 1e9:.4g} GB/s) "
            f"and a matrix-vector product over a {gemv} matrix ({memory_gemv / 1e9:.4g} GB/s), best of repeats")],
        "op_overhead_s": [overhead, f"{here}: the median of {_OVERHEAD_CALLS} calls of nn.Linear(1, 1) on a "
                                    "[1, 1] input"],
        "dense_flops_per_s": {fmt: [rate, f"{here}: {fmt} matmul {plan.matmul_size}^3, best of repeats"]
                              for fmt, rate in flops.items()},
    }
    if cache_gemv:
        entry["cache_bandwidth_bytes_per_s"] = [cache_gemv, f"{here}: a matrix-vector product over a "
                                                f"{plan.cache_gemv_size}^2 matrix, best of repeats"]
    return entry


def this_machine(device: str = "cpu", refresh: bool = False) -> Hardware:
    """The measured roofs of the device a model on `device` runs on (`probed_device`): read from that
    device's cache file, or measured (and cached) on first use; where the cache cannot be written,
    measured once per process and kept in memory.

    Args:
        device: the model's device ("cpu", "cuda:0", "mps", "meta").
        refresh: measure again even if a cached result exists.
    """
    device = probed_device(device)
    path = cache_path(device)
    if not refresh and str(path) in _in_memory:
        return hardware_from_dict(THIS_MACHINE, _in_memory[str(path)])
    try:
        if not refresh and path.is_file():
            return hardware_from_dict(THIS_MACHINE, json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValueError):
        log.warning("Ignoring unreadable probe cache %s; measuring again.", path)
    entry = measure(device)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entry, indent=2))
        _in_memory.pop(str(path), None)
    except OSError as exc:
        log.warning("Cannot cache the machine probe in %s (%s); keeping it in memory.", path, exc.strerror or exc)
        _in_memory[str(path)] = entry
    return hardware_from_dict(THIS_MACHINE, entry)


def resolve_hardware(name_or_path: str, device: str = "cpu") -> Hardware:
    """`this_machine(device)` for "this-machine" (measured on first use), else `get_hardware(name_or_path)`.

    Args:
        device: the device the model runs on, whose roofs "this-machine" means.

    Raises:
        ConfigError: neither a known name nor a readable hardware file.
    """
    return this_machine(device) if name_or_path == THIS_MACHINE else get_hardware(name_or_path)
