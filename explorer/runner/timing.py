"""Clocks for the timing points of one hooked step: the host's perf_counter, or CUDA events.

A clock is called at every timing point of the step and returns a float, which the recorder keeps
as a stop's start or end; after the pass every start and end must be seconds on one time line.
`time.perf_counter` is one already. On a CUDA device `CudaEventClock` records a
`torch.cuda.Event` on the device's stream instead and returns its index, so the host never waits
inside the step; `resolve` then synchronises once and turns each index into seconds since the first
event (`elapsed_time`, in ms). An event's time is when the GPU reached it: where the GPU outruns the
host's kernel launches (a small model's decode step), a stop's time includes the launch gaps, as its
wall time does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch

Clock = Callable[[], float]


def synced_clock(sync: Callable[[], None]) -> Clock:
    """`time.perf_counter` read after `sync()` (the devices have finished their queued work)."""

    def clock() -> float:
        sync()
        return time.perf_counter()

    return clock


class CudaEventClock:
    """Readings are CUDA events recorded on `device`'s current stream; `resolve` makes them seconds.

    Args:
        device: the CUDA device the whole model runs on.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.current_stream(device)
        self.marks: list[torch.cuda.Event] = []

    def __call__(self) -> float:
        """Record an event (no host sync); returns its index, which `resolve` replaces by seconds."""
        mark = torch.cuda.Event(enable_timing=True)
        mark.record(self.stream)
        self.marks.append(mark)
        return float(len(self.marks) - 1)

    def resolve(self, events: Iterable) -> None:
        """Synchronise `device` once, then set each event's `start` and `end` (indices), and those of
        its `spans`, to seconds since the first reading."""
        if not self.marks:
            return
        torch.cuda.synchronize(self.device)
        first = self.marks[0]
        seconds = [first.elapsed_time(mark) / 1e3 for mark in self.marks]
        for event in events:
            event.start, event.end = seconds[int(event.start)], seconds[int(event.end)]
            event.spans = [(seconds[int(start)], seconds[int(end)]) for start, end in event.spans]


def step_clock(model: torch.nn.Module, device: str) -> Clock:
    """The clock for a hooked step of `model`, whose inputs go to `device`.

    CPU and `meta`: `time.perf_counter`. One CUDA device: `CudaEventClock`. A model spread over
    several CUDA devices (events of different devices cannot be compared) or on MPS (no timing
    events): perf_counter after synchronising every device, so each stop waits for its kernels.
    """
    target = torch.device(device)
    if target.type == "mps":
        return synced_clock(torch.mps.synchronize)
    if target.type != "cuda":
        return time.perf_counter
    if len(set(getattr(model, "hf_device_map", {}).values())) > 1:
        return synced_clock(_synchronize_all_cuda)
    return CudaEventClock(target)


def _synchronize_all_cuda() -> None:
    for index in range(torch.cuda.device_count()):
        torch.cuda.synchronize(index)
