"""The loopback link of this machine, measured: a gloo all-reduce between --ranks local processes
(torch.distributed over 127.0.0.1, one thread each) for messages from 8 B to --largest bytes, the
median time of --repeats after a warm-up per size, then the ring all-reduce model t = 2(p-1)·alpha +
2(p-1)/p · n / beta fitted to them (`explorer.analysis.collectives.fit_all_reduce`) and printed: the
latency alpha (s) and bandwidth beta (bytes/s) the catalogue's "loopback" link holds
(`explorer.analysis.hardware_catalogue.LINKS`). Prints measurements, never asserts.

Run: python benchmarks/bench_loopback.py [--ranks 2] [--repeats 30] [--largest 67108864]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from explorer.analysis.collectives import all_reduce, fit_all_reduce
from explorer.figures.theme import si_text


def _rank(rank: int, ranks: int, port: int, sizes: list[int], repeats: int, out) -> None:
    """One process: join the gloo group, time `repeats` all-reduces of each size (after 3 warm-ups)."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    medians = []
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32)
        times = []
        for repeat in range(repeats + 3):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            if repeat >= 3:
                times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    if rank == 0:
        out.put(medians)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--largest", type=int, default=64 << 20, help="the largest message, bytes")
    args = parser.parse_args()
    sizes = [8 << (2 * i) for i in range(20) if 8 << (2 * i) <= args.largest]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(_rank, args=(args.ranks, port, sizes, args.repeats, queue), nprocs=args.ranks,
                       start_method="spawn")
    medians = queue.get()
    alpha, beta = fit_all_reduce(list(zip(sizes, medians, strict=True)), args.ranks)
    print(f"gloo all-reduce over loopback, {args.ranks} processes, median of {args.repeats} (measured)")
    print(f"{'bytes':>10} {'measured':>11} {'fit':>11}")
    for size, seconds in zip(sizes, medians, strict=True):
        fit = all_reduce(size, args.ranks, alpha, beta).seconds
        print(f"{si_text(size, 'B'):>10} {seconds * 1e6:>9.1f}µs {fit * 1e6:>9.1f}µs")
    print(f"fit: latency alpha = {alpha * 1e6:.1f} µs a step, bandwidth beta = {si_text(beta, 'B/s')} each way")


if __name__ == "__main__":
    main()
