""""This machine": peak matmul FLOP/s and copy bandwidth, measured once with numpy and cached.

The probe takes about a second: float32 matmuls of 1024x1024 matrices (2*1024^3 FLOPs each) and
copies of a 64 MiB array (each copy reads and writes it: 2 * 64 MiB moved). The best of a few
repeats is kept, as a peak. It measures what numpy's BLAS reaches on the CPU, not the GPU.
The result is cached as JSON in the user cache dir (`EXPLORER_CACHE_DIR` overrides it); where that
cannot be written (a read-only cache), it is kept in memory for the life of the process instead.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime, timezone

import numpy as np

from explorer.analysis.hardware import THIS_MACHINE, Hardware, get_hardware, hardware_from_dict
from explorer.config import cache_dir

log = logging.getLogger(__name__)

CACHE_FILE = "this_machine.json"
_MATMUL_SIZE = 1024
_COPY_BYTES = 64 * 2**20
_BUDGET_S = 0.4  # per measurement; the whole probe stays well under 3 s
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


def measure() -> dict:
    """Run the probe; returns a hardware entry (numbers as [value, source] pairs)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((_MATMUL_SIZE, _MATMUL_SIZE), dtype=np.float32)
    b = rng.standard_normal((_MATMUL_SIZE, _MATMUL_SIZE), dtype=np.float32)
    out = np.empty_like(a)
    flops_per_s = _best_rate(2.0 * _MATMUL_SIZE**3, lambda: np.matmul(a, b, out=out))
    src = np.ones(_COPY_BYTES // 4, dtype=np.float32)
    dst = np.empty_like(src)
    bytes_per_s = _best_rate(2.0 * _COPY_BYTES, lambda: np.copyto(dst, src))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    matmul_source = f"measured here {when}: numpy float32 matmul {_MATMUL_SIZE}^3, best of repeats"
    copy_source = f"measured here {when}: numpy copy of 64 MiB (read + write), best of repeats"
    return {
        "name": f"This machine (CPU, {os.cpu_count()} cores, numpy)",
        "memory_bytes": [_memory_bytes(), "os.sysconf(SC_PHYS_PAGES * SC_PAGE_SIZE)"],
        "memory_bandwidth_bytes_per_s": [bytes_per_s, copy_source],
        "dense_flops_per_s": {"fp32": [flops_per_s, matmul_source]},
    }


def _memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0.0


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
