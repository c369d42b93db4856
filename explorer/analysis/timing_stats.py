"""How much a stop's measured wall time can be trusted: the median and spread of its repeats in one
step, and whether it is above the timer's noise floor. Pure Python and numpy over traces.

One measurement of a stop is mostly noise on a busy machine (on the shared 2-core machine this was
written on, under load, the 30 layers' identical v_proj GEMMs of one SmolLM2 prefill read 0.06 to
8.8 ms; when calm, 0.03 to 0.2 ms in a decode step). But a step
runs every decoder layer, and each layer runs each of its stops once, with the same shapes as in the
other layers of the same kind: a step of an L-layer model holds L repeated measurements of every
layer stop. `step_timings` summarises them per stop (median, p10-p90, min-max); the stops outside the
layers (tokenize, embed, final norm, LM head, sample, detokenize) are one measurement each.

Times come from `OpRecord.wall_ms` (milliseconds, float): `time.perf_counter` on the CPU, MPS and a
model spread over several GPUs, CUDA events on one GPU (`explorer.runner.timing`). The warm-up of a
fresh model (the first forward's lazy initialisation, the chat template's compilation) is run at
load time (`explorer.runner.warm_up.warm_up`), so no step shown carries it.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from explorer.stop_names import parse_stop_name
from explorer.trace import OpRecord, StepTrace

PERF_COUNTER_RESOLUTION_MS = time.get_clock_info("perf_counter").resolution * 1e3  # 1e-6 ms on Linux
CUDA_EVENT_RESOLUTION_MS = 0.5e-3  # cudaEventElapsedTime: "a resolution of around 0.5 microseconds"
# What the hooks themselves cost between a stop's two clock readings: a stop that launches no kernel
# (attn.gqa_expand, a broadcast) reads 3-10 µs on the CPU here (SmolLM2, 2-core machine), so a time
# below 10 µs cannot be told from the timing's own overhead.
HOOK_OVERHEAD_MS = 0.01
NOISE_FLOOR_MS = max(HOOK_OVERHEAD_MS, PERF_COUNTER_RESOLUTION_MS, CUDA_EVENT_RESOLUTION_MS)
_CACHE_SIZE = 8


@dataclass(frozen=True)
class StopTiming:
    """A stop's wall time in one step, in milliseconds (float64), over its repeats in that step.

    Attributes:
        stop: the layer-relative stop name ("attn.q_proj"), or the name outside the layers ("lm_head").
        count: measurements behind the numbers: the layers that ran this stop with the same input and
            output shapes (L for most models; fewer where layers differ, e.g. sliding-window ones), 1
            for a stop outside the layers.
        median_ms: the median of the measurements (numpy.median).
        p10_ms, p90_ms: their 10th and 90th percentiles (numpy.percentile, linear interpolation).
        min_ms, max_ms: the fastest and slowest.
    """

    stop: str
    count: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float

    @property
    def repeated(self) -> bool:
        """True when more than one measurement stands behind the median."""
        return self.count > 1

    @property
    def noise(self) -> bool:
        """True when the median is below `NOISE_FLOOR_MS`: within the timer's resolution and the hooks'
        own overhead, so the number says nothing about the stop's compute."""
        return is_noise(self.median_ms)


def is_noise(wall_ms: float) -> bool:
    """True for a time (ms) below `NOISE_FLOOR_MS`."""
    return wall_ms < NOISE_FLOOR_MS


def timing_stats(stop: str, walls_ms: list[float]) -> StopTiming:
    """The median, p10, p90, min and max of `walls_ms` (ms, at least one value).

    Raises:
        ValueError: `walls_ms` is empty.
    """
    if not walls_ms:
        raise ValueError(f"No measurements of {stop}.")
    values = np.asarray(walls_ms, dtype=np.float64)
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return StopTiming(stop, len(values), float(median), float(p10), float(p90), float(values.min()),
                      float(values.max()))


def step_timings(trace: StepTrace) -> dict[tuple[str, str], StopTiming]:
    """Every timed stop of the step, keyed by `peer_key`: one entry per layer stop and shape (its
    measurements in every layer where it had those shapes) and one per stop outside the layers.

    A stop that launches no kernel (wall_ms None, a view) has no entry; a shape-only step (the meta
    device: nothing ran) has none at all. Computed once per trace: the last few are remembered
    (weakly: a remembered trace is not kept alive), since every hover of a figure asks again.
    """
    with _CACHE_LOCK:
        cached = _CACHE.get(id(trace))
        if cached is not None and cached[0]() is trace:
            return cached[1]
    timings = {} if trace.shape_only else _timings(trace.ops)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[id(trace)] = (weakref.ref(trace), timings)  # a dead reference never matches a new trace
    return timings


def stop_timing(trace: StepTrace, op: OpRecord) -> StopTiming | None:
    """The timing of `op` (one of `trace`'s stops) over its repeats in the step; None for a view or a
    shape-only step."""
    return step_timings(trace).get(peer_key(op))


def peer_key(op: OpRecord) -> tuple[str, str]:
    """(layer-relative stop name, its shapes as text): the stops of other layers that share it ran the
    same computation on the same shapes."""
    return parse_stop_name(op.name)[1], repr((op.input_shapes, op.output_shapes))


def _timings(ops: list[OpRecord]) -> dict[tuple[str, str], StopTiming]:
    groups: dict[tuple[str, str], list[float]] = {}
    for op in ops:
        if op.wall_ms is not None:
            groups.setdefault(peer_key(op), []).append(op.wall_ms)
    return {key: timing_stats(key[0], walls) for key, walls in groups.items()}


_CACHE: dict[int, tuple[weakref.ref, dict[tuple[str, str], StopTiming]]] = {}
_CACHE_LOCK = threading.Lock()  # the app draws figures in several threads


def timing_text(timing: StopTiming | None) -> str:
    """A stop's time for a table cell, in ms: "0.42" (one measurement), "0.09 [0.08-0.11]" (median
    [p10-p90] of its repeats), "<0.01 noise" below the noise floor, "view" for no kernel (None)."""
    if timing is None:
        return "view"
    if timing.noise:
        return f"<{NOISE_FLOOR_MS:g} noise"
    if not timing.repeated:
        return ms_number(timing.median_ms)
    return f"{ms_number(timing.median_ms)} [{ms_number(timing.p10_ms)}-{ms_number(timing.p90_ms)}]"


def ms_number(wall_ms: float) -> str:
    """Milliseconds: no decimal at 100 ms and above ("113"), two down to 0.01 ms ("0.42"), four below
    ("0.0065": a time under the noise floor never reads as 0.01 or 0.00)."""
    if wall_ms >= 100:
        return f"{wall_ms:.0f}"
    return f"{wall_ms:.2f}" if wall_ms >= NOISE_FLOOR_MS else f"{wall_ms:.4f}"


def spread_text(timing: StopTiming, with_range: bool = True) -> str:
    """"median of 30 layers 0.09 ms (p10-p90 0.08-0.11, range 0.07-0.23 ms)" (ms); without the
    range: "median of 30 layers 0.09 ms (p10-p90 0.08-0.11)"."""
    spread = f"p10-p90 {ms_number(timing.p10_ms)}-{ms_number(timing.p90_ms)}"
    if with_range:
        spread += f", range {ms_number(timing.min_ms)}-{ms_number(timing.max_ms)} ms"
    return f"median of {timing.count} layers {ms_number(timing.median_ms)} ms ({spread})"


def noise_text(wall_ms: float) -> str:
    """" (below 0.01 ms: the timer's resolution and overhead, noise)" for a time under the noise floor, else ""."""
    return f" (below {NOISE_FLOOR_MS:g} ms: the timer's resolution and overhead, noise)" if is_noise(wall_ms) else ""


def timing_description(timing: StopTiming | None, layer_ms: float | None = None, layer: int | None = None) -> str:
    """A hover's sentence on a measured time: what the number is and how far to trust it.

    Args:
        timing: the stop's timing (`stop_timing`); None for a stop that launched no kernel.
        layer_ms, layer: the shown layer's own measurement of the stop (ms) and its index, if any.
    """
    if timing is None:
        return "no kernel (a view)"
    if not timing.repeated:
        return f"{ms_number(timing.median_ms)} ms, one measurement{noise_text(timing.median_ms)}"
    text = spread_text(timing) + noise_text(timing.median_ms)
    if layer_ms is not None and layer is not None:
        text += f"; layer {layer} itself {ms_number(layer_ms)} ms"
    return text
