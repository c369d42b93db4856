""""This machine": peak matmul FLOP/s, memory and cache bandwidth, and the time of a near-empty
operator, measured once with torch on the CPU and cached.

The probe takes about four seconds, each rate the best of a few repeats (a peak), with torch's own
threads (all cores), under `torch.inference_mode` as the runner runs the model:
- FLOP/s: float32 matmuls of 1024x1024 matrices (2 * 1024^3 FLOPs each);
- memory bandwidth: the better of a copy of 256 MiB (read + write: 2 * 256 MiB moved) and a
  matrix-vector product over an 8192 x 8192 float32 matrix (256 MiB read), larger than the caches:
  what a decode step's weight GEMMs do;
- cache bandwidth: the same matrix-vector product over a 1024 x 1024 matrix (4 MiB): a weight that
  stays in the caches (a small model's GEMMs read theirs at this rate, above the memory slope);
- operator overhead: the median time of an `nn.Linear(1, 1)` call on a [1, 1] input, what every
  operator pays in Python dispatch and kernel launch whatever its size.
It measures the CPU, not a GPU. The result is cached as JSON in the user cache dir
(`EXPLORER_CACHE_DIR` overrides it); where that cannot be written (a read-only cache), it is kept in
memory for the life of the process instead.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from datetime import datetime, timezone

import psutil
import torch

from explorer.analysis.hardware import THIS_MACHINE, Hardware, get_hardware, hardware_from_dict
from explorer.config import cache_dir

log = logging.getLogger(__name__)

CACHE_FILE = "this_machine_v2.json"  # v2: torch, all threads, cache bandwidth and operator overhead
_MATMUL_SIZE = 1024
_COPY_BYTES = 256 * 2**20
_MEMORY_GEMV = 8192  # an [8192, 8192] float32 matrix: 256 MiB, past the caches
_CACHE_GEMV = 1024  # a [1024, 1024] float32 matrix: 4 MiB, within them
_OVERHEAD_CALLS = 200
_BUDGET_S = 0.4  # per measurement; the whole probe takes about 4 s (its first use only: then cached)
# Probe results that could not be written to their cache file, by that file's path.
_in_memory: dict[str, dict] = {}


def _best_rate(work: float, run, budget_s: float = _BUDGET_S) -> float:
    """Largest work/second over repeats of `run` within `budget_s` (at least three repeats)."""
    best, start, repeats = 0.0, time.perf_counter(), 0
    while repeats < 3 or time.perf_counter() - start < budget_s:
        tick = time.perf_counter()
        run()
        best = max(best, work / max(time.perf_counter() - tick, 1e-9))
        repeats += 1
    return best


def _gemv_rate(size: int) -> float:
    """Bytes/s read by `F.linear` of one row over a [size, size] float32 weight."""
    weight, row = torch.ones(size, size), torch.ones(1, size)
    return _best_rate(4.0 * size * size, lambda: torch.nn.functional.linear(row, weight))


def _overhead_s() -> float:
    """Median seconds of an `nn.Linear(1, 1)` call on a [1, 1] input."""
    layer, x = torch.nn.Linear(1, 1), torch.zeros(1, 1)
    times = []
    for _ in range(_OVERHEAD_CALLS):
        tick = time.perf_counter()
        layer(x)
        times.append(time.perf_counter() - tick)
    return statistics.median(times)


def measure() -> dict:
    """Run the probe; returns a hardware entry (numbers as [value, source] pairs)."""
    with torch.inference_mode():
        a, b = torch.randn(_MATMUL_SIZE, _MATMUL_SIZE), torch.randn(_MATMUL_SIZE, _MATMUL_SIZE)
        out = torch.empty_like(a)
        flops_per_s = _best_rate(2.0 * _MATMUL_SIZE**3, lambda: torch.matmul(a, b, out=out))
        src = torch.ones(_COPY_BYTES // 4)
        dst = torch.empty_like(src)
        copy = _best_rate(2.0 * _COPY_BYTES, lambda: dst.copy_(src))
        memory_gemv, cache_gemv = _gemv_rate(_MEMORY_GEMV), _gemv_rate(_CACHE_GEMV)
        overhead = _overhead_s()
    threads = torch.get_num_threads()
    here = f"measured here {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} with torch, {threads} threads"
    memory_source = (f"{here}: the better of a 256 MiB copy (read + write, {copy / 1e9:.3g} GB/s) and a "
                     f"matrix-vector product over a 256 MiB float32 matrix ({memory_gemv / 1e9:.3g} GB/s), "
                     "best of repeats")
    return {
        "name": f"This machine (CPU, {os.cpu_count()} cores, torch)",
        "memory_bytes": [float(psutil.virtual_memory().total), "psutil.virtual_memory().total"],
        "memory_bandwidth_bytes_per_s": [max(copy, memory_gemv), memory_source],
        "cache_bandwidth_bytes_per_s": [cache_gemv, f"{here}: a matrix-vector product over a 4 MiB float32 "
                                                    "matrix, best of repeats"],
        "op_overhead_s": [overhead, f"{here}: the median of {_OVERHEAD_CALLS} calls of nn.Linear(1, 1) on a "
                                    "[1, 1] input"],
        "dense_flops_per_s": {"fp32": [flops_per_s, f"{here}: float32 matmul {_MATMUL_SIZE}^3, best of repeats"]},
    }


def this_machine(refresh: bool = False) -> Hardware:
    """This machine's entry: read from the cache, or measured (and cached) on first use; where the
    cache cannot be written, measured once per process and kept in memory.

    Args:
        refresh: measure again even if a cached result exists.
    """
    path = cache_dir() / CACHE_FILE
    if not refresh and str(path) in _in_memory:
        return hardware_from_dict(THIS_MACHINE, _in_memory[str(path)])
    try:
        if not refresh and path.is_file():
            return hardware_from_dict(THIS_MACHINE, json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValueError):
        log.warning("Ignoring unreadable probe cache %s; measuring again.", path)
    entry = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entry, indent=2))
        _in_memory.pop(str(path), None)
    except OSError as exc:
        log.warning("Cannot cache the machine probe in %s (%s); keeping it in memory.", path, exc.strerror or exc)
        _in_memory[str(path)] = entry
    return hardware_from_dict(THIS_MACHINE, entry)


def resolve_hardware(name_or_path: str) -> Hardware:
    """`this_machine()` for "this-machine" (measured on first use), else `get_hardware(name_or_path)`.

    Raises:
        ConfigError: neither a known name nor a readable hardware file.
    """
    return this_machine() if name_or_path == THIS_MACHINE else get_hardware(name_or_path)
